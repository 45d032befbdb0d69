package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orbitrun/orbit/internal/db"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

// Settings of the cross-node row (N-2).
const (
	// crossNodeRate is the offered rate of each phase, per second.
	crossNodeRate = 100.0
	// crossNodeSenders bounds the producer's requests in flight.
	crossNodeSenders = 16
	// crossNodeWorkerCapacity is the capacity of each phase-2 worker.
	crossNodeWorkerCapacity = 8
	// targetCrossNodeP99 is N-2's bound on cross-node commit→receive.
	targetCrossNodeP99 = 50 * time.Millisecond
)

// Queues of the cross-node row: results, and tasks for a worker on node A
// and one on node B.
const (
	crossNodeResults = "xnode"
	crossNodeTasksA  = "xnode-tasks-a"
	crossNodeTasksB  = "xnode-tasks-b"
)

// crossNodeResult is the cross-node row: two Orbit nodes on one database,
// node A the run's server, node B a second one.
type crossNodeResult struct {
	Rate      float64 // offered per second, in each phase
	Offered   int     // results scheduled: rate × duration
	Committed int64   // results committed through node A
	Achieved  float64 // results committed per second
	Errors    int64
	// Cross is commit→receive for a consumer on node B, Same for one on
	// node A, of the same results.
	Cross, Same *latencies
	// Tasks is the second phase: tasks submitted through node A, half of
	// them to a queue served by a worker on node B (AssignCross), half to
	// one served by a worker on node A (AssignSame).
	Tasks                   int
	AssignCross, AssignSame *latencies
	Cost                    cost
}

// runCrossNode starts node B on the run's database, with a pool of its
// own, and measures in two phases of dur each, at rate per second:
//
//  1. results: PENDING tasks of one queue are cancelled through node A's
//     HTTP API on a fixed schedule; one subscription of the queue is
//     consumed on node B, another on node A; each records, per event,
//     handler start − occurred_at (stamped in the appending transaction).
//  2. tasks: tasks are submitted through node A on a fixed schedule,
//     alternately to a queue whose only worker is connected to node B and
//     to one whose worker is connected to node A; each records handler
//     start − the moment the submission began.
func runCrossNode(ctx context.Context, e *env, rate float64, dur time.Duration) (*crossNodeResult, error) {
	poolB, err := db.Open(ctx, e.mysql.DSN(orbitDatabase))
	if err != nil {
		return nil, err
	}
	defer poolB.Close()
	poolB.SetMaxOpenConns(e.cfg.Database.MaxOpenConns)
	poolB.SetMaxIdleConns(e.cfg.Database.MaxOpenConns)
	b, err := e.startNode(ctx, poolB, nil)
	if err != nil {
		return nil, fmt.Errorf("cross-node: node B: %w", err)
	}
	defer b.stop(e.log)

	client, hc, err := e.newClient(crossNodeSenders)
	if err != nil {
		return nil, err
	}
	defer hc.CloseIdleConnections()

	r := &crossNodeResult{Rate: rate, Cross: &latencies{}, Same: &latencies{}, AssignCross: &latencies{}, AssignSame: &latencies{}}
	if err := r.results(ctx, e, client, b, rate, dur); err != nil {
		return nil, fmt.Errorf("cross-node results: %w", err)
	}
	if err := r.tasks(ctx, e, client, b, rate, dur); err != nil {
		return nil, fmt.Errorf("cross-node tasks: %w", err)
	}
	return r, nil
}

func (r *crossNodeResult) results(ctx context.Context, e *env, client *orbit.Client, b *node, rate float64, dur time.Duration) error {
	ids, err := e.insertPending(ctx, []string{e.cred.Queues[crossNodeResults]}, int(rate*dur.Seconds()))
	if err != nil {
		return err
	}
	r.Offered = len(ids)
	mine := make(map[string]bool, len(ids))
	for _, id := range ids {
		mine[id] = true
	}
	record := func(l *latencies) orbit.EventHandler {
		return func(_ context.Context, d *orbit.Delivery) error {
			received := time.Now()
			if mine[d.Event.AggregateID] {
				l.add(d.Event.ID, received.Sub(d.Event.OccurredAt))
			}
			return nil
		}
	}
	subB, err := e.subscribe(ctx, client, "xnode-b", crossNodeResults, nil, 0)
	if err != nil {
		return err
	}
	subA, err := e.subscribe(ctx, client, "xnode-a", crossNodeResults, nil, 0)
	if err != nil {
		return err
	}
	onB, err := e.startConsumersAt(ctx, b.url, []string{subB}, 1, record(r.Cross))
	if err != nil {
		return err
	}
	defer onB.stop()
	onA, err := e.startConsumers(ctx, []string{subA}, 1, record(r.Same))
	if err != nil {
		return err
	}
	defer onA.stop()
	if err := waitFor(ctx, 30*time.Second, 10*time.Millisecond, "event sessions", func() (bool, error) {
		var open int
		err := e.pool.QueryRowContext(ctx, `SELECT COUNT(*) FROM event_sessions WHERE subscription_id IN (?, ?) AND closed_at IS NULL`, subA, subB).Scan(&open)
		return open >= 2, err
	}); err != nil {
		return err
	}

	before, err := e.snapshot(ctx)
	if err != nil {
		return err
	}
	var committed, errs atomic.Int64
	began := time.Now()
	schedule(ctx, rate, len(ids), func(i int) {
		if _, err := client.CancelTask(ctx, ids[i], "xnode-"+ids[i], orbit.CancelTaskRequest{}); err != nil {
			if errs.Add(1) == 1 {
				e.log.Warn("cross-node: cancel", "err", err)
			}
			return
		}
		committed.Add(1)
	})
	r.Achieved = float64(committed.Load()) / max(time.Since(began), dur).Seconds()
	r.Committed, r.Errors = committed.Load(), errs.Load()
	// Wait for the stragglers, at most 20 s after the last commit.
	_ = waitFor(ctx, 20*time.Second, 5*time.Millisecond, "deliveries", func() (bool, error) {
		return r.Cross.n.Load() >= r.Committed && r.Same.n.Load() >= r.Committed, nil
	})
	after, err := e.snapshot(ctx)
	if err != nil {
		return err
	}
	r.Cost = before.to(after)
	if err := onB.stop(); err != nil {
		return fmt.Errorf("consumer on node B: %w", err)
	}
	return onA.stop()
}

func (r *crossNodeResult) tasks(ctx context.Context, e *env, client *orbit.Client, b *node, rate float64, dur time.Duration) error {
	n := int(rate * dur.Seconds())
	r.Tasks = n
	submitted := make([]atomic.Int64, n) // UnixNano when the submission began
	record := func(l *latencies) orbit.TaskHandler {
		return func(_ context.Context, task *orbit.AssignedTask) orbit.Outcome {
			started := time.Now()
			var in struct {
				I int `json:"i"`
			}
			if json.Unmarshal(task.Input, &in) == nil && in.I >= 0 && in.I < n {
				l.add(task.ID, started.Sub(time.Unix(0, submitted[in.I].Load())))
			}
			return orbit.Succeeded(json.RawMessage(`{"ok":true}`))
		}
	}
	workCtx, stopWorkers := context.WithCancel(ctx)
	var workers sync.WaitGroup
	var workerErr atomic.Value
	defer func() {
		stopWorkers()
		workers.Wait()
	}()
	for _, w := range []struct {
		url, queue string
		lat        *latencies
	}{{b.url, crossNodeTasksB, r.AssignCross}, {e.url, crossNodeTasksA, r.AssignSame}} {
		worker, err := orbit.NewWorker(orbit.WorkerConfig{
			BaseURL: w.url, Token: e.cred.Token, QueueID: e.cred.Queues[w.queue], Capacity: crossNodeWorkerCapacity,
			WorkerName: "bench-" + w.queue, Logger: e.log,
		}, record(w.lat))
		if err != nil {
			return err
		}
		workers.Go(func() {
			if err := worker.Run(workCtx); err != nil {
				workerErr.CompareAndSwap(nil, err)
			}
		})
	}
	if err := waitFor(ctx, 30*time.Second, 10*time.Millisecond, "worker sessions", func() (bool, error) {
		var open int
		err := e.pool.QueryRowContext(ctx, `SELECT COUNT(*) FROM worker_sessions WHERE queue_id IN (?, ?) AND closed_at IS NULL`,
			e.cred.Queues[crossNodeTasksA], e.cred.Queues[crossNodeTasksB]).Scan(&open)
		return open >= 2, err
	}); err != nil {
		return err
	}

	var errs atomic.Int64
	queues := []string{e.cred.Queues[crossNodeTasksB], e.cred.Queues[crossNodeTasksA]}
	schedule(ctx, rate, n, func(i int) {
		submitted[i].Store(time.Now().UnixNano())
		_, err := client.SubmitTask(ctx, fmt.Sprintf("xnode-%d", i), orbit.SubmitTaskRequest{
			QueueID: queues[i%2], Input: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)),
		})
		if err != nil && errs.Add(1) == 1 {
			e.log.Warn("cross-node: submit", "err", err)
		}
	})
	want := int64(n) - errs.Load()
	err := waitFor(ctx, 30*time.Second, 5*time.Millisecond, "assignments", func() (bool, error) {
		if err, _ := workerErr.Load().(error); err != nil {
			return false, err
		}
		return r.AssignCross.n.Load()+r.AssignSame.n.Load() >= want, nil
	})
	r.Errors += errs.Load()
	return err
}

// schedule calls offer(i) for i in [0, n) at rate per second, open loop, from
// up to crossNodeSenders goroutines, and returns when every call returned.
func schedule(ctx context.Context, rate float64, n int, offer func(i int)) {
	jobs := make(chan int, n)
	var senders sync.WaitGroup
	for range crossNodeSenders {
		senders.Go(func() {
			for i := range jobs {
				if ctx.Err() == nil {
					offer(i)
				}
			}
		})
	}
	began := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	for i := range n {
		if d := time.Until(began.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		jobs <- i
	}
	close(jobs)
	senders.Wait()
}

func (r *crossNodeResult) summary() string {
	c50, _, c99, _ := r.Cross.percentiles()
	s50, _, s99, _ := r.Same.percentiles()
	a50, _, a99, _ := r.AssignCross.percentiles()
	b50, _, b99, _ := r.AssignSame.percentiles()
	return fmt.Sprintf("cross-node: commit→receive at %s/s offered (achieved %s/s): node B p50 %s, p99 %s; node A p50 %s, p99 %s; "+
		"submit→assign, %d tasks: worker on B p50 %s, p99 %s; on A p50 %s, p99 %s; %d errors",
		num(r.Rate), num(r.Achieved), ms(c50), ms(c99), ms(s50), ms(s99), r.Tasks, ms(a50), ms(a99), ms(b50), ms(b99), r.Errors)
}
