package main

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orbitrun/orbit/internal/db"
)

// rawResult is the single-row commit ceiling at one concurrency.
type rawResult struct {
	Conns   int
	Commits int64
	Cost    cost
	Rate    float64
}

// runRaw measures single-row INSERT + COMMIT transactions per second into a
// scratch table, at each concurrency for dur: the most commits per second
// the server gives a client that does one row per transaction.
func runRaw(ctx context.Context, e *env, concurrency []int, dur time.Duration) ([]rawResult, error) {
	if _, err := e.admin.ExecContext(ctx, "CREATE DATABASE bench_raw"); err != nil {
		return nil, err
	}
	pool, err := db.Open(ctx, e.mysql.DSN("bench_raw"))
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if _, err := pool.ExecContext(ctx, `CREATE TABLE scratch (
		id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
		payload VARBINARY(255) NOT NULL,
		created_at DATETIME(6) NOT NULL) ENGINE=InnoDB`); err != nil {
		return nil, err
	}
	payload := make([]byte, 200)
	var out []rawResult
	for _, n := range concurrency {
		pool.SetMaxOpenConns(n)
		pool.SetMaxIdleConns(n)
		commits, c, err := runFor(ctx, e, n, dur, func(int, int) error {
			return inTx(ctx, pool, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO scratch (payload, created_at) VALUES (?, ?)`, payload, db.Now())
				return err
			})
		})
		if err != nil {
			return nil, fmt.Errorf("raw commit at %d connections: %w", n, err)
		}
		out = append(out, rawResult{Conns: n, Commits: commits, Cost: c, Rate: float64(commits) / c.Elapsed.Seconds()})
	}
	return out, nil
}

// runFor runs op in a loop on each of workers goroutines for dur, with
// the worker's number and the loop's count, and returns how many calls
// completed and what the machine spent meanwhile. The first error stops
// its worker and is returned once all have stopped.
func runFor(ctx context.Context, e *env, workers int, dur time.Duration, op func(worker, i int) error) (int64, cost, error) {
	before, err := e.snapshot(ctx)
	if err != nil {
		return 0, cost{}, err
	}
	var done atomic.Int64
	var firstErr atomic.Value
	runCtx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; runCtx.Err() == nil; i++ {
				if err := op(w, i); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, cost{}, err
	}
	after, err := e.snapshot(ctx)
	if err != nil {
		return 0, cost{}, err
	}
	return done.Load(), before.to(after), nil
}

// inTx runs fn in a transaction of pool and commits it.
func inTx(ctx context.Context, pool *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := pool.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}
