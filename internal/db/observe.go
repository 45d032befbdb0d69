package db

import (
	"database/sql"
	"sync"
)

// Outcomes of a transaction attempt, as ObserveTx reports them.
const (
	// TxCommit is an attempt that committed.
	TxCommit = "commit"
	// TxRollback is an attempt rolled back for good: fn failed, the
	// context ended, or the deadlock retries ran out.
	TxRollback = "rollback"
	// TxRetriedDeadlock is an attempt rolled back by a deadlock (Galera
	// certification conflicts included), a lock wait timeout or a Galera
	// node not ready, and run again.
	TxRetriedDeadlock = "retried_deadlock"
	// TxCommitUnknown is an attempt whose COMMIT lost its connection
	// (ErrCommitUnknown).
	TxCommitUnknown = "commit_unknown"
)

// observers holds the ObserveTx function of each observed pool. It is keyed
// by pool, so two servers in one process (parallel tests) observe only
// their own transactions.
var observers sync.Map // *sql.DB -> *observer

type observer struct{ fn func(string) }

// ObserveTx makes Tx call fn with the outcome of every transaction attempt
// on pool, once the attempt is over: one of TxCommit, TxRollback,
// TxRetriedDeadlock or TxCommitUnknown. fn must be fast and must not block.
// The returned function stops the observation; a pool has at most one
// observer, the last one set.
func ObserveTx(pool *sql.DB, fn func(outcome string)) (stop func()) {
	o := &observer{fn: fn}
	observers.Store(pool, o)
	return func() { observers.CompareAndDelete(pool, o) }
}

// observe reports one attempt's outcome to pool's observer, if any.
func observe(pool *sql.DB, outcome string) {
	if o, ok := observers.Load(pool); ok {
		o.(*observer).fn(outcome)
	}
}

// commitHooks holds the OnCommit functions of each transaction Tx is
// running, from BEGIN until its COMMIT or rollback.
var commitHooks sync.Map // *sql.Tx -> *hooks

type hooks struct {
	pool   *sql.DB
	mu     sync.Mutex
	fns    []func()
	values map[any]any
}

// TxValue returns the value kept under key for tx, made by mk on the
// first call for that key in this attempt of the transaction. It lets the
// writes of one transaction share what they must do after its commit: one
// OnCommit function, registered by mk, for all of them. The value is
// dropped with the attempt; mk may call OnCommit, not TxValue. tx must be a transaction of a running Tx; on any other
// TxValue panics, a programmer error.
func TxValue[T any](tx *sql.Tx, key any, mk func() T) T {
	h, ok := commitHooks.Load(tx)
	if !ok {
		panic("db: TxValue on a transaction that Tx is not running")
	}
	hs := h.(*hooks)
	hs.mu.Lock()
	v, ok := hs.values[key]
	hs.mu.Unlock()
	if ok {
		return v.(T)
	}
	// A transaction is used by one goroutine at a time, so nobody else
	// makes the value meanwhile; mk runs unlocked since it may call
	// OnCommit.
	made := mk()
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.values == nil {
		hs.values = map[any]any{}
	}
	hs.values[key] = made
	return made
}

// Pool returns the pool whose Tx is running tx, for work that must follow
// the commit on a connection of its own (see OnCommit). tx must be a
// transaction of a running Tx; on any other Pool panics, a programmer error.
func Pool(tx *sql.Tx) *sql.DB {
	h, ok := commitHooks.Load(tx)
	if !ok {
		panic("db: Pool on a transaction that Tx is not running")
	}
	return h.(*hooks).pool
}

// OnCommit makes fn run after tx commits, once, in the goroutine that
// called Tx; when the attempt is rolled back (a failure, or a deadlock
// that Tx retries) fn is dropped, and the retried fn registers its own.
// It is how a change counts what it did (a metric) only once it is
// durable. tx must be a transaction of a running Tx; on any other OnCommit
// panics, a programmer error.
func OnCommit(tx *sql.Tx, fn func()) {
	h, ok := commitHooks.Load(tx)
	if !ok {
		panic("db: OnCommit on a transaction that Tx is not running")
	}
	hs := h.(*hooks)
	hs.mu.Lock()
	hs.fns = append(hs.fns, fn)
	hs.mu.Unlock()
}

// runHooks runs the OnCommit functions of a committed tx.
func runHooks(h *hooks) {
	h.mu.Lock()
	fns := h.fns
	h.fns = nil
	h.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}
