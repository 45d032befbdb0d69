package db_test

import (
	"errors"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/orbitrun/orbit/internal/db"
)

func TestNewID_Is32LowercaseHexAndUnique(t *testing.T) {
	t.Parallel()
	form := regexp.MustCompile(`^[0-9a-f]{32}$`)
	seen := make(map[string]bool)
	for range 10000 {
		id := db.NewID()
		if !form.MatchString(id) {
			t.Fatalf("NewID() = %q, want 32 lowercase hex characters", id)
		}
		if seen[id] {
			t.Fatalf("NewID() returned %s twice", id)
		}
		seen[id] = true
	}
}

func TestNow_IsUTCInMicroseconds(t *testing.T) {
	t.Parallel()
	now := db.Now()
	if now.Location() != time.UTC {
		t.Errorf("Now() is in %v, want UTC", now.Location())
	}
	if now.Nanosecond()%1000 != 0 {
		t.Errorf("Now() = %v has sub-microsecond digits", now)
	}
	if d := time.Since(now); d < 0 || d > time.Second {
		t.Errorf("Now() is %v away from the clock", d)
	}
}

func TestErrorHelpers_SeeThroughWrapping(t *testing.T) {
	t.Parallel()
	wrap := func(n uint16) error {
		return fmt.Errorf("store: insert: %w", &mysql.MySQLError{Number: n})
	}
	for _, tc := range []struct {
		err                           error
		duplicate, deadlock, lockWait bool
	}{
		{wrap(1062), true, false, false},
		{wrap(1213), false, true, false},
		{wrap(1205), false, false, true},
		{wrap(1146), false, false, false},
		{errors.New("Error 1062: not a MySQL error value"), false, false, false},
		{nil, false, false, false},
	} {
		if got := db.IsDuplicateKey(tc.err); got != tc.duplicate {
			t.Errorf("IsDuplicateKey(%v) = %v", tc.err, got)
		}
		if got := db.IsDeadlock(tc.err); got != tc.deadlock {
			t.Errorf("IsDeadlock(%v) = %v", tc.err, got)
		}
		if got := db.IsLockTimeout(tc.err); got != tc.lockWait {
			t.Errorf("IsLockTimeout(%v) = %v", tc.err, got)
		}
	}
}
