package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	orbit "github.com/orbitrun/orbit/sdk/go"
)

// Settings of the live row.
const (
	liveQueues = 4

	liveWorkerCapacity = 8
	liveSubmitters     = 4 // per queue
	liveConsumers      = 1 // per subscription
)

// liveBatch is the number of tasks per request of the live row with batch
// submission (POST /v1/tasks:batch).
const liveBatch = 100

// liveWorkersPerQueue is the number of SDK workers per queue (-live-workers).
var liveWorkersPerQueue = 1

// liveResult is results produced by workers and delivered at the same
// time: tasks submitted, completed by SDK workers, their results delivered
// to and acknowledged by consumers.
type liveResult struct {
	Tasks      int
	Elapsed    time.Duration // first submission → last acknowledgement
	Rate       float64
	SubmitRate float64 // submissions per second while submitting
	CommitRate float64 // results committed per second, first submission → last result committed
	Cost       cost
	Stats      orbit.ConsumerStats
	Lat        *latencies
	DBSamples  string // statements found executing in the database
}

// runLive submits n tasks spread over liveQueues queues as fast as
// liveSubmitters per queue can, lets SDK workers complete them and measures
// until consumers of one subscription per queue have acknowledged all n
// results. Its queues are named prefix-0 … ; with batch > 0 each request
// submits batch tasks (SubmitTasks) instead of one.
func runLive(ctx context.Context, e *env, prefix string, n, batch int, timeout time.Duration) (*liveResult, error) {
	res := &liveResult{Tasks: n, Lat: &latencies{}}
	client, hc, err := e.newClient(liveQueues * liveSubmitters)
	if err != nil {
		return nil, err
	}
	defer hc.CloseIdleConnections()

	var subs, queueIDs []string
	for i := range liveQueues {
		q := fmt.Sprintf("%s-%d", prefix, i)
		sub, err := e.subscribe(ctx, client, q, q, nil, 0)
		if err != nil {
			return nil, err
		}
		subs = append(subs, sub)
		queueIDs = append(queueIDs, e.cred.Queues[q])
	}
	cs, err := e.startConsumers(ctx, subs, liveConsumers, func(_ context.Context, d *orbit.Delivery) error {
		res.Lat.add(d.Event.ID, time.Since(d.Event.OccurredAt))
		return nil
	})
	if err != nil {
		return nil, err
	}
	defer cs.stop()

	workCtx, stopWorkers := context.WithCancel(ctx)
	var workers sync.WaitGroup
	var workerErr atomic.Value
	defer func() {
		stopWorkers()
		workers.Wait()
	}()
	for _, q := range queueIDs {
		for i := range liveWorkersPerQueue {
			w, err := orbit.NewWorker(orbit.WorkerConfig{
				BaseURL: e.url, Token: e.cred.Token, QueueID: q, Capacity: liveWorkerCapacity,
				WorkerName: fmt.Sprintf("bench-%d", i), Logger: e.log,
			}, func(context.Context, *orbit.AssignedTask) orbit.Outcome {
				return orbit.Succeeded(json.RawMessage(`{"ok":true}`))
			})
			if err != nil {
				return nil, err
			}
			workers.Go(func() {
				if err := w.Run(workCtx); err != nil {
					workerErr.CompareAndSwap(nil, err)
				}
			})
		}
	}
	want := liveQueues * liveWorkersPerQueue
	if err := waitFor(ctx, 30*time.Second, 10*time.Millisecond, "worker sessions", func() (bool, error) {
		var open int
		err := e.pool.QueryRowContext(ctx, `SELECT COUNT(*) FROM worker_sessions WHERE closed_at IS NULL`).Scan(&open)
		return open >= want, err
	}); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, 30*time.Second, 10*time.Millisecond, "event sessions", func() (bool, error) {
		var open int
		err := e.pool.QueryRowContext(ctx, `SELECT COUNT(*) FROM event_sessions WHERE closed_at IS NULL`).Scan(&open)
		return open >= len(subs)*liveConsumers, err
	}); err != nil {
		return nil, err
	}

	before, err := e.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	sampler := e.startSampler(ctx, sampleEvery)
	defer sampler.stop()
	began := time.Now()
	var next atomic.Int64
	var submitting sync.WaitGroup
	var submitErr atomic.Value
	for s := range liveQueues * liveSubmitters {
		queue := queueIDs[s%liveQueues]
		submitting.Go(func() {
			if batch > 0 {
				submitBatches(ctx, client, prefix, queue, n, batch, &next, &submitErr)
				return
			}
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || ctx.Err() != nil {
					return
				}
				_, err := client.SubmitTask(ctx, fmt.Sprintf("%s-%d", prefix, i), orbit.SubmitTaskRequest{
					QueueID: queue, Input: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)),
				})
				if err != nil {
					submitErr.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	// Note when the last result is committed, apart from its delivery.
	committed := make(chan time.Duration, 1)
	go func() {
		defer close(committed)
		args := make([]any, len(queueIDs))
		for i, q := range queueIDs {
			args[i] = q
		}
		// Every 25 ms: a row runs for many seconds, and a tighter poll is
		// a statement stream of its own in the row's costs.
		err := waitFor(ctx, timeout, 25*time.Millisecond, "live results", func() (bool, error) {
			var head int
			err := e.pool.QueryRowContext(ctx, `SELECT COALESCE(SUM(head_sequence), 0) FROM queue_streams
				WHERE queue_id IN (?`+strings.Repeat(", ?", len(args)-1)+`)`, args...).Scan(&head)
			return head >= n, err
		})
		if err == nil {
			committed <- time.Since(began)
		}
	}()
	submitting.Wait()
	if err, _ := submitErr.Load().(error); err != nil {
		return nil, fmt.Errorf("live: submit: %w", err)
	}
	res.SubmitRate = float64(n) / time.Since(began).Seconds()
	if err := cs.waitAcked(ctx, uint64(n), timeout); err != nil {
		if werr, _ := workerErr.Load().(error); werr != nil {
			err = fmt.Errorf("%w (worker: %v)", err, werr)
		}
		return nil, fmt.Errorf("live: %w", err)
	}
	res.Elapsed = time.Since(began)
	res.DBSamples = sampler.finish(10)
	after, err := e.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	res.Cost = before.to(after)
	res.Rate = float64(n) / res.Elapsed.Seconds()
	if d, ok := <-committed; ok {
		res.CommitRate = float64(n) / d.Seconds()
	}
	res.Stats = cs.stats()
	stopWorkers()
	workers.Wait()
	if err := cs.stop(); err != nil {
		return nil, fmt.Errorf("live consumers: %w", err)
	}
	return res, nil
}

// submitBatches submits tasks of the live row batch at a time, taking their
// numbers from next until n are taken; the first error goes to submitErr.
func submitBatches(ctx context.Context, client *orbit.Client, prefix, queue string, n, batch int, next *atomic.Int64, submitErr *atomic.Value) {
	for ctx.Err() == nil {
		first := next.Add(int64(batch)) - int64(batch)
		if first >= int64(n) {
			return
		}
		last := min(first+int64(batch), int64(n))
		tasks := make([]orbit.BatchTask, 0, last-first)
		for i := first; i < last; i++ {
			tasks = append(tasks, orbit.BatchTask{IdempotencyKey: fmt.Sprintf("%s-%d", prefix, i), SubmitTaskRequest: orbit.SubmitTaskRequest{
				QueueID: queue, Input: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)),
			}})
		}
		results, err := client.SubmitTasks(ctx, tasks)
		if err == nil {
			for _, r := range results {
				if r.Err != nil {
					err = fmt.Errorf("task %s: %w", r.IdempotencyKey, r.Err)
					break
				}
			}
		}
		if err != nil {
			submitErr.CompareAndSwap(nil, err)
			return
		}
	}
}
