package main

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/modules/tasks"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

// Settings of the fixed-load rows.
const (
	latencyQueues  = 4
	latencySenders = 64 // concurrent cancel requests at most
)

// loadLevel is one offered rate.
type loadLevel struct {
	Label string
	Rate  float64 // offered results per second
	// Direct commits each result with the tasks store in its own
	// transaction (TaskCancel, then the node's wake-up, as the HTTP
	// handler does) instead of through the HTTP API, so that the
	// producer's cost does not cap the offered rate.
	Direct bool
}

// producer names how the level's results are committed.
func (l loadLevel) producer() string {
	if l.Direct {
		return "store commits"
	}
	return "HTTP cancels"
}

// latencyResult is commit→receive latency at one offered rate.
type latencyResult struct {
	Level         loadLevel
	Offered       int     // cancels scheduled: rate × duration
	Committed     int64   // cancels that committed a result
	Late          int64   // scheduled cancels not started within the window (the server fell behind)
	Achieved      float64 // results committed per second over the window
	Received      int     // distinct events received
	Duplicates    int64   // deliveries of an event received before
	Errors        int64
	P50, P95, P99 time.Duration
	Max           time.Duration
	Cost          cost
	DBSamples     string // statements found executing in the database
	Steps         string // the server's histograms of a result's steps (stepsLine)
}

// runLatency offers results at each level's rate for dur: it cancels
// PENDING tasks, pre-inserted on latencyQueues queues that no worker serves,
// through the HTTP API on a fixed schedule (open loop, up to latencySenders
// requests in flight). Each cancel commits one task.cancelled result in its
// own transaction. Consumers of one subscription per queue record, for each
// event, the time between its occurred_at (stamped in the appending
// transaction, just before its COMMIT) and the moment the handler runs.
func runLatency(ctx context.Context, e *env, levels []loadLevel, dur time.Duration, done func(latencyResult)) ([]latencyResult, error) {
	client, hc, err := e.newClient(latencySenders)
	if err != nil {
		return nil, err
	}
	defer hc.CloseIdleConnections()

	// Pre-insert the tasks of every level, round robin over the queues.
	var queues []string
	for i := range latencyQueues {
		queues = append(queues, e.cred.Queues[fmt.Sprintf("lat-%d", i)])
	}
	ids := make([][]string, len(levels))
	level := map[string]int{}
	for li, l := range levels {
		if ids[li], err = e.insertPending(ctx, queues, int(l.Rate*dur.Seconds())); err != nil {
			return nil, fmt.Errorf("latency: %w", err)
		}
		for _, id := range ids[li] {
			level[id] = li
		}
	}

	var subs []string
	for i := range latencyQueues {
		q := fmt.Sprintf("lat-%d", i)
		sub, err := e.subscribe(ctx, client, q, q, nil, 0)
		if err != nil {
			return nil, err
		}
		subs = append(subs, sub)
	}
	lats := make([]*latencies, len(levels))
	for i := range lats {
		lats[i] = &latencies{}
	}
	cs, err := e.startConsumers(ctx, subs, 1, func(_ context.Context, d *orbit.Delivery) error {
		received := time.Now()
		if li, ok := level[d.Event.AggregateID]; ok {
			lats[li].add(d.Event.ID, received.Sub(d.Event.OccurredAt))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	defer cs.stop()
	if err := waitFor(ctx, 30*time.Second, 10*time.Millisecond, "event sessions", func() (bool, error) {
		var open int
		err := e.pool.QueryRowContext(ctx, `SELECT COUNT(*) FROM event_sessions WHERE closed_at IS NULL`).Scan(&open)
		return open >= len(subs), err
	}); err != nil {
		return nil, err
	}

	var out []latencyResult
	for li, l := range levels {
		r := latencyResult{Level: l, Offered: len(ids[li])}
		before, err := e.snapshot(ctx)
		if err != nil {
			return nil, err
		}
		stepsBefore, err := e.stepHistograms()
		if err != nil {
			return nil, err
		}
		offer := func(ctx context.Context, id string) error {
			_, err := client.CancelTask(ctx, id, "lat-"+id, orbit.CancelTaskRequest{})
			return err
		}
		if l.Direct {
			offer = func(ctx context.Context, id string) error {
				// The store announces the append after its commit.
				return e.tasks.Store().Tx(ctx, func(tx *sql.Tx) error {
					_, _, err := tasks.TaskCancel(ctx, tx, id, "bench")
					return err
				})
			}
		}
		sampler := e.startSampler(ctx, sampleEvery)
		jobs := make(chan string, len(ids[li]))
		var errs, committed, late atomic.Int64
		var senders sync.WaitGroup
		began := time.Now()
		for range latencySenders {
			senders.Go(func() {
				for id := range jobs {
					// A cancel that could not start within the window
					// is not offered: the load stays bounded to dur.
					if time.Since(began) > dur {
						late.Add(1)
						continue
					}
					if err := offer(ctx, id); err != nil {
						if errs.Add(1) == 1 {
							e.log.Warn("latency: cancel", "err", err)
						}
						continue
					}
					committed.Add(1)
				}
			})
		}
		interval := time.Duration(float64(time.Second) / l.Rate)
		for i, id := range ids[li] {
			if d := time.Until(began.Add(time.Duration(i) * interval)); d > 0 {
				time.Sleep(d)
			}
			jobs <- id
		}
		close(jobs)
		senders.Wait()
		r.Achieved = float64(committed.Load()) / max(time.Since(began), dur).Seconds()
		r.Errors = errs.Load()
		r.Late = late.Load()
		r.Committed = committed.Load()
		want := committed.Load()
		// Wait for the stragglers, at most 20 s after the last commit.
		_ = waitFor(ctx, 20*time.Second, 5*time.Millisecond, "deliveries", func() (bool, error) {
			return lats[li].n.Load() >= want, cs.err()
		})
		r.DBSamples = sampler.finish(12)
		after, err := e.snapshot(ctx)
		if err != nil {
			return nil, err
		}
		stepsAfter, err := e.stepHistograms()
		if err != nil {
			return nil, err
		}
		r.Steps = stepsLine(stepsBefore, stepsAfter)
		r.Cost = before.to(after)
		r.Received = int(lats[li].n.Load())
		r.Duplicates = lats[li].dups.Load()
		r.P50, r.P95, r.P99, r.Max = lats[li].percentiles()
		out = append(out, r)
		done(r)
		if err := cs.err(); err != nil {
			return nil, fmt.Errorf("latency consumers: %w", err)
		}
	}
	if err := cs.stop(); err != nil {
		return nil, fmt.Errorf("latency consumers: %w", err)
	}
	return out, nil
}

// insertPending inserts n PENDING tasks round robin over queues, prefillTx
// per transaction, and returns their ids in order. No worker serves the
// queues: the tasks wait to be cancelled, each cancel committing one
// result.
func (e *env) insertPending(ctx context.Context, queues []string, n int) ([]string, error) {
	ids := make([]string, 0, n)
	for start := 0; start < n; start += prefillTx {
		count := min(prefillTx, n-start)
		err := db.Tx(ctx, e.pool, func(tx *sql.Tx) error {
			ids = ids[:start]
			for i := range count {
				t, err := tasks.TaskInsert(ctx, tx, &tasks.TaskInsertParams{
					NamespaceID: e.cred.NamespaceID, QueueID: queues[(start+i)%len(queues)], CredentialID: e.cred.ID,
					Input: []byte(`{}`), MaxAttempts: 3,
				})
				if err != nil {
					return err
				}
				ids = append(ids, t.ID)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("insert tasks: %w", err)
		}
	}
	return ids, nil
}
