package db

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/go-sql-driver/mysql"
)

// MySQL error numbers the stores act on.
const (
	errDuplicateKey    = 1062 // ER_DUP_ENTRY
	errLockWaitTimeout = 1205 // ER_LOCK_WAIT_TIMEOUT
	errDeadlock        = 1213 // ER_LOCK_DEADLOCK

	// errNodeNotReady is ER_UNKNOWN_COM_ERROR, which a Galera node returns
	// as "WSREP has not yet prepared node for application use" while it is
	// not a synced member of a primary component (joining, or cut off from
	// the majority). Orbit sends no unknown commands, its other meaning.
	errNodeNotReady = 1047
)

// unavailableNumbers are the server and client error numbers that say the
// database cannot be reached or is going away, rather than that a statement
// is wrong.
var unavailableNumbers = map[uint16]bool{
	1040: true, // ER_CON_COUNT_ERROR: too many connections
	1047: true, // ER_UNKNOWN_COM_ERROR: a Galera node not ready (WSREP has not yet prepared node for application use)
	1053: true, // ER_SERVER_SHUTDOWN: server shutdown in progress
	1152: true, // ER_ABORTING_CONNECTION
	1158: true, // ER_NET_READ_ERROR
	1159: true, // ER_NET_READ_INTERRUPTED
	1160: true, // ER_NET_ERROR_ON_WRITE
	1161: true, // ER_NET_WRITE_INTERRUPTED
	1927: true, // ER_CONNECTION_KILLED (MariaDB)
	2002: true, // CR_CONNECTION_ERROR
	2003: true, // CR_CONN_HOST_ERROR
	2006: true, // CR_SERVER_GONE_ERROR
	2013: true, // CR_SERVER_LOST
}

// IsDuplicateKey reports whether err, or an error it wraps, is MySQL's
// duplicate key error (1062).
func IsDuplicateKey(err error) bool {
	return hasNumber(err, errDuplicateKey)
}

// IsDeadlock reports whether err, or an error it wraps, says the transaction
// was chosen as a deadlock victim and rolled back (1213). On a Galera
// cluster (MariaDB 10.11, galera-4 26.4) a transaction aborted by a
// conflicting write from another node, whether by certification at COMMIT
// or by the applier (brute-force abort), fails with the same 1213,
// "Deadlock found when trying to get lock; try restarting transaction".
func IsDeadlock(err error) bool {
	return hasNumber(err, errDeadlock)
}

// IsLockTimeout reports whether err, or an error it wraps, is a lock wait
// timeout (1205). By default InnoDB then rolls back only the statement, not
// the transaction.
func IsLockTimeout(err error) bool {
	return hasNumber(err, errLockWaitTimeout)
}

// IsNodeNotReady reports whether err, or an error it wraps, is a Galera
// node's refusal to run statements while it is not a synced member of a
// primary component (1047, "WSREP has not yet prepared node for application
// use"). Nothing ran; the statement may succeed later or on another node.
func IsNodeNotReady(err error) bool {
	return hasNumber(err, errNodeNotReady)
}

// IsUnavailable reports whether err, or an error it wraps, says that the
// database could not be reached or did not answer in time: a refused or
// broken connection (driver.ErrBadConn, mysql.ErrInvalidConn, network
// errors, an unexpected EOF), a deadline that passed, or a MySQL error
// number that means the server is gone, shutting down or full, or a Galera
// node that is not ready (1047, ErrNotReady). Such a failure is temporary:
// the same request may succeed once the database is back. A canceled
// context is not unavailability: the caller gave up.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return unavailableNumbers[me.Number]
	}
	var (
		oe *net.OpError
		ne net.Error
	)
	switch {
	case errors.Is(err, driver.ErrBadConn),
		errors.Is(err, ErrNotReady),
		errors.Is(err, mysql.ErrInvalidConn),
		errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE):
		return true
	case errors.As(err, &oe):
		// Dial, read and write failures: refused, unreachable, reset.
		return true
	case errors.As(err, &ne) && ne.Timeout():
		// I/O timeouts.
		return true
	}
	return false
}

func hasNumber(err error, number uint16) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == number
}
