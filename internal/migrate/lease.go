package migrate

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Up serialises itself with a lease row in a small table rather than with
// GET_LOCK: a named lock is local to one server, so on a Galera cluster two
// nodes would both grant it (MariaDB 10.11) or refuse it (other versions).
// MySQL commits DDL implicitly, so no row lock can be held across a
// migration's statements either. The lease names its owner and an expiry;
// the owner renews it while it migrates and deletes it at the end, and a
// lease whose owner died is taken over once it has expired.

const (
	// leaseTTL is how long a lease lasts unless renewed. An Up that died
	// holding it delays the next one by at most this long.
	leaseTTL = 20 * time.Second

	// leaseRenewEvery is how often the owner renews its lease.
	leaseRenewEvery = leaseTTL / 4

	// leaseWait is how long Up waits for another Up on the same database
	// to finish.
	leaseWait = 60 * time.Second

	// leasePoll is how often a waiting Up tries to take the lease.
	leasePoll = 100 * time.Millisecond
)

// createLeaseTable creates the table that holds the lease.
const createLeaseTable = `CREATE TABLE IF NOT EXISTS schema_migrations_lock (
  id         TINYINT UNSIGNED NOT NULL COMMENT 'always 1: one lease per database',
  owner      CHAR(32)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'random ID of the migrate.Up that holds the lease',
  expires_at DATETIME(6) NOT NULL COMMENT 'UTC; the lease may be taken over after this unless its owner renews it',
  PRIMARY KEY (id)
) ENGINE=InnoDB COMMENT='lease that lets one migrate.Up at a time change this database'`

// takeLease inserts the lease, or takes it over when it has expired, or
// renews it when owner holds it already. MySQL applies the assignments of
// ON DUPLICATE KEY UPDATE left to right, so expires_at sees the new owner.
const takeLease = `INSERT INTO schema_migrations_lock (id, owner, expires_at)
	VALUES (1, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
	ON DUPLICATE KEY UPDATE
	  owner = IF(expires_at < UTC_TIMESTAMP(6), VALUES(owner), owner),
	  expires_at = IF(owner = VALUES(owner), VALUES(expires_at), expires_at)`

// lease is the migration lease of one database, held by one Up.
type lease struct {
	pool  *sql.DB
	owner string

	stop chan struct{} // closed by release: ends the renewal
	done chan struct{} // closed when the renewal has ended

	mu   sync.Mutex
	lost error // why the lease was lost, if it was
}

// acquireLease creates the lease table if needed and takes the lease,
// waiting up to leaseWait for another Up to release it or for its lease to
// expire. The lease is renewed in the background until release.
func acquireLease(ctx context.Context, pool *sql.DB) (*lease, error) {
	if _, err := pool.ExecContext(ctx, createLeaseTable); err != nil {
		return nil, fmt.Errorf("migrate: create schema_migrations_lock: %w", err)
	}
	l := &lease{pool: pool, owner: newOwner(), stop: make(chan struct{}), done: make(chan struct{})}
	deadline := time.Now().Add(leaseWait)
	for {
		held, err := l.take(ctx)
		if err != nil {
			return nil, err
		}
		if held {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("migrate: the migration lease (schema_migrations_lock) is held by another migration for more than %s", leaseWait)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("migrate: wait for the migration lease: %w", ctx.Err())
		case <-time.After(leasePoll):
		}
	}
	go l.renew()
	return l, nil
}

// take tries once to take or renew the lease and reports whether l holds
// it. Losing a race to another node (a deadlock, a lock wait timeout or a
// Galera certification failure, all 1213 or 1205) is not an error: the
// lease is simply not held yet.
func (l *lease) take(ctx context.Context) (bool, error) {
	_, err := l.pool.ExecContext(ctx, takeLease, l.owner, leaseTTL.Microseconds())
	if err != nil {
		if isConflict(err) {
			return false, nil
		}
		return false, fmt.Errorf("migrate: take the migration lease: %w", err)
	}
	var owner string
	err = l.pool.QueryRowContext(ctx, "SELECT owner FROM schema_migrations_lock WHERE id = 1").Scan(&owner)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil // released between the two statements
	case err != nil:
		return false, fmt.Errorf("migrate: read the migration lease: %w", err)
	}
	return owner == l.owner, nil
}

// renew extends the lease every leaseRenewEvery until release. If another
// Up took the lease over, because renewals failed for longer than leaseTTL,
// the lease is lost: Up stops before its next file.
func (l *lease) renew() {
	defer close(l.done)
	tick := time.NewTicker(leaseRenewEvery)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), leaseTTL)
		held, err := l.take(ctx)
		cancel()
		if err == nil && !held {
			l.mu.Lock()
			l.lost = errors.New("migrate: the migration lease expired and another migration took it over; stopped")
			l.mu.Unlock()
			return
		}
		// Any other failure is retried at the next tick; the lease stays
		// ours until it expires.
	}
}

// check returns an error once the lease is lost.
func (l *lease) check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// release ends the renewal and deletes the lease, even when ctx has ended.
// If the delete fails the lease expires after leaseTTL.
func (l *lease) release(ctx context.Context) {
	close(l.stop)
	<-l.done
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, _ = l.pool.ExecContext(ctx, "DELETE FROM schema_migrations_lock WHERE id = 1 AND owner = ?", l.owner)
}

// migrating reports whether an Up holds an unexpired lease on the pool's
// database, in which case a file in state 'applying' is being applied now
// rather than left half-applied.
func migrating(ctx context.Context, pool *sql.DB) bool {
	var n int
	err := pool.QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations_lock WHERE expires_at > UTC_TIMESTAMP(6)").Scan(&n)
	return err == nil && n > 0
}

// isConflict reports whether err is a deadlock or lock wait timeout, which
// is also how Galera reports a certification failure.
func isConflict(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

// newOwner returns a random lease owner ID.
func newOwner() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}
