package db_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/orbitrun/orbit/internal/db"
)

// TestC7_IsUnavailableTellsOutagesFromBugs: the errors of a database that
// cannot be reached are unavailability, wrapped or not; errors of a
// statement, a canceled request and plain errors are not.
func TestC7_IsUnavailableTellsOutagesFromBugs(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"BadConn", driver.ErrBadConn, true},
		{"InvalidConn", mysql.ErrInvalidConn, true},
		{"ConnectionRefused", refused, true},
		{"WrappedConnectionRefused", fmt.Errorf("auth: look up credential: %w", refused), true},
		{"BareConnectionRefused", syscall.ECONNREFUSED, true},
		{"ConnectionReset", fmt.Errorf("tasks: lease: %w", syscall.ECONNRESET), true},
		{"IOTimeout", timeout, true},
		{"DeadlineExceeded", fmt.Errorf("subscriptions: claim: %w", context.DeadlineExceeded), true},
		{"ServerShutdown", &mysql.MySQLError{Number: 1053, Message: "Server shutdown in progress"}, true},
		{"TooManyConnections", &mysql.MySQLError{Number: 1040, Message: "Too many connections"}, true},
		{"ConnectionKilled", &mysql.MySQLError{Number: 1927, Message: "Connection was killed"}, true},
		{"GaleraNodeNotReady", &mysql.MySQLError{Number: 1047, Message: "WSREP has not yet prepared node for application use"}, true},
		{"ServerGone", &mysql.MySQLError{Number: 2006, Message: "MySQL server has gone away"}, true},
		{"ServerLost", fmt.Errorf("tx: %w", &mysql.MySQLError{Number: 2013, Message: "Lost connection"}), true},
		{"CannotConnect", &mysql.MySQLError{Number: 2003, Message: "Can't connect"}, true},
		{"Nil", nil, false},
		{"Canceled", fmt.Errorf("store: %w", context.Canceled), false},
		{"DuplicateKey", &mysql.MySQLError{Number: 1062, Message: "Duplicate entry"}, false},
		{"NoSuchTable", &mysql.MySQLError{Number: 1146, Message: "Table doesn't exist"}, false},
		{"SyntaxError", &mysql.MySQLError{Number: 1064, Message: "You have an error in your SQL syntax"}, false},
		{"Plain", errors.New("store: claim: connection refused"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := db.IsUnavailable(tt.err); got != tt.want {
				t.Fatalf("IsUnavailable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
