package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	orbit "github.com/orbitrun/orbit/sdk/go"
)

// idleConnections is the number of connected consumers of the memory row.
const idleConnections = 128

// rssResult is the process's memory with idleConnections event connections
// open and idle.
type rssResult struct {
	Connections int
	Before      int64 // VmRSS before connecting
	With        int64 // VmRSS with every connection open
	Peak        int64 // VmHWM of the whole run so far
	Goroutines  int
	HeapInuse   uint64
}

// runRSS connects idleConnections SDK consumers to a subscription of an
// empty queue, waits until the server has recorded every session, and reads
// the process's resident memory. The Orbit server runs in this process, so
// the figure includes the consumers' side as well.
func runRSS(ctx context.Context, e *env) (*rssResult, error) {
	client, hc, err := e.newClient(2)
	if err != nil {
		return nil, err
	}
	defer hc.CloseIdleConnections()
	sub, err := e.subscribe(ctx, client, "idle", "idle", nil, 0)
	if err != nil {
		return nil, err
	}
	// Let connections of earlier phases close on the server first.
	if err := waitFor(ctx, 30*time.Second, 50*time.Millisecond, "earlier event sessions to close", func() (bool, error) {
		var open int
		err := e.pool.QueryRowContext(ctx, `SELECT COUNT(*) FROM event_sessions WHERE closed_at IS NULL`).Scan(&open)
		return open == 0, err
	}); err != nil {
		return nil, err
	}
	runtime.GC()
	time.Sleep(time.Second)
	res := &rssResult{Connections: idleConnections}
	res.Before, _ = rss()
	cs, err := e.startConsumers(ctx, []string{sub}, idleConnections, func(context.Context, *orbit.Delivery) error { return nil })
	if err != nil {
		return nil, err
	}
	defer cs.stop()
	if err := waitFor(ctx, 60*time.Second, 50*time.Millisecond, fmt.Sprintf("%d event sessions", idleConnections), func() (bool, error) {
		if err := cs.err(); err != nil {
			return false, err
		}
		var open int
		err := e.pool.QueryRowContext(ctx, `SELECT COUNT(*) FROM event_sessions WHERE subscription_id = ? AND closed_at IS NULL`, sub).Scan(&open)
		return open >= idleConnections, err
	}); err != nil {
		return nil, err
	}
	// Let the connections settle (first polls and claims) before reading.
	time.Sleep(3 * time.Second)
	res.With, res.Peak = rss()
	res.Goroutines = runtime.NumGoroutine()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.HeapInuse = ms.HeapInuse
	if st := cs.stats(); st.Reconnects > 0 {
		return nil, fmt.Errorf("idle consumers reconnected %d times", st.Reconnects)
	}
	if err := cs.stop(); err != nil {
		return nil, fmt.Errorf("idle consumers: %w", err)
	}
	return res, nil
}
