package db

import (
	"errors"

	"github.com/go-sql-driver/mysql"
)

// MySQL error numbers the stores act on.
const (
	errDuplicateKey    = 1062 // ER_DUP_ENTRY
	errLockWaitTimeout = 1205 // ER_LOCK_WAIT_TIMEOUT
	errDeadlock        = 1213 // ER_LOCK_DEADLOCK
)

// IsDuplicateKey reports whether err, or an error it wraps, is MySQL's
// duplicate key error (1062).
func IsDuplicateKey(err error) bool {
	return hasNumber(err, errDuplicateKey)
}

// IsDeadlock reports whether err, or an error it wraps, says the transaction
// was chosen as a deadlock victim and rolled back (1213).
func IsDeadlock(err error) bool {
	return hasNumber(err, errDeadlock)
}

// IsLockTimeout reports whether err, or an error it wraps, is a lock wait
// timeout (1205). By default InnoDB then rolls back only the statement, not
// the transaction.
func IsLockTimeout(err error) bool {
	return hasNumber(err, errLockWaitTimeout)
}

func hasNumber(err error, number uint16) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == number
}
