package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	orbit "github.com/orbitrun/orbit/sdk/go"
)

const (
	submitQueues  = 4
	submitSenders = 64 // requests in flight
)

// submitResult is the HTTP submit row: how many POST /v1/tasks the server
// accepts per second with submitSenders requests in flight.
type submitResult struct {
	Accepted  int64
	Errors    int64
	Rate      float64 // accepted per second
	P50, P99  time.Duration
	Max       time.Duration
	Cost      cost
	DBSamples string
}

// runSubmit has submitSenders SDK clients submit one task per request,
// round robin over submitQueues queues that no worker serves, as fast as
// each gets its answer, for dur. A task counts once its 201 arrived.
func runSubmit(ctx context.Context, e *env, dur time.Duration) (*submitResult, error) {
	client, hc, err := e.newClient(submitSenders)
	if err != nil {
		return nil, err
	}
	defer hc.CloseIdleConnections()
	res := &submitResult{}
	lat := &latencies{}
	before, err := e.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	sampler := e.startSampler(ctx, sampleEvery)
	began := time.Now()
	var accepted, failed, next atomic.Int64
	var senders sync.WaitGroup
	for s := range submitSenders {
		queue := e.cred.Queues[fmt.Sprintf("submit-%d", s%submitQueues)]
		senders.Go(func() {
			for time.Since(began) < dur && ctx.Err() == nil {
				i := next.Add(1)
				start := time.Now()
				_, err := client.SubmitTask(ctx, fmt.Sprintf("submit-%d", i), orbit.SubmitTaskRequest{
					QueueID: queue, Input: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)),
				})
				if err != nil {
					if failed.Add(1) == 1 {
						e.log.Warn("submit", "err", err)
					}
					continue
				}
				accepted.Add(1)
				lat.add(fmt.Sprint(i), time.Since(start))
			}
		})
	}
	senders.Wait()
	elapsed := time.Since(began)
	res.DBSamples = sampler.finish(12)
	after, err := e.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	res.Cost = before.to(after)
	res.Accepted, res.Errors = accepted.Load(), failed.Load()
	res.Rate = float64(res.Accepted) / elapsed.Seconds()
	res.P50, _, res.P99, res.Max = lat.percentiles()
	return res, nil
}

func (r *submitResult) summary() string {
	return fmt.Sprintf("HTTP submits: %s accepted/s with %d requests in flight (%d accepted, %d errors); request p50 %s, p99 %s, max %s",
		num(r.Rate), submitSenders, r.Accepted, r.Errors, ms(r.P50), ms(r.P99), ms(r.Max))
}
