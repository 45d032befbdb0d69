package main

import (
	"context"
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
		before, err := e.snapshot(ctx)
		if err != nil {
			return nil, err
		}
		var commits atomic.Int64
		var firstErr atomic.Value
		runCtx, cancel := context.WithTimeout(ctx, dur)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				for runCtx.Err() == nil {
					tx, err := pool.BeginTx(ctx, nil)
					if err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
					if _, err := tx.ExecContext(ctx, `INSERT INTO scratch (payload, created_at) VALUES (?, ?)`, payload, db.Now()); err != nil {
						tx.Rollback()
						firstErr.CompareAndSwap(nil, err)
						return
					}
					if err := tx.Commit(); err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
					commits.Add(1)
				}
			})
		}
		wg.Wait()
		cancel()
		if err, _ := firstErr.Load().(error); err != nil {
			return nil, fmt.Errorf("raw commit at %d connections: %w", n, err)
		}
		after, err := e.snapshot(ctx)
		if err != nil {
			return nil, err
		}
		c := before.to(after)
		out = append(out, rawResult{Conns: n, Commits: commits.Load(), Cost: c, Rate: float64(commits.Load()) / c.Elapsed.Seconds()})
	}
	return out, nil
}
