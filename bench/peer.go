package main

import (
	"context"
	stdsql "database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/go-sql-driver/mysql"
)

// Settings of the peer rows.
const (
	peerDatabase   = "watermill"
	peerTopic      = "bench"
	peerPublishers = 16 // concurrent Publish calls, one message each
)

// peerPublish is Watermill SQL publishing the messages every peer row
// consumes.
type peerPublish struct {
	Messages int
	Rate     float64
	Cost     cost
}

// peerResult is one Watermill SQL subscriber, with its MySQL schema and
// offsets adapters at one subscribe batch size, consuming and acking every
// published message.
type peerResult struct {
	Batch    int
	Group    string
	Messages int
	Consumed int
	Elapsed  time.Duration // until the offset of the last consumed message is committed
	Rate     float64
	Complete bool // every message consumed within the time cap
	Cost     cost
}

// peerPayload is about the size of an Orbit task.cancelled event's JSON,
// so both systems move rows of similar size.
var peerPayload = `{"type":"task.cancelled","details":{"reason":"cancel_requested","state":"CANCELLED"},"snapshot":{"schema_version":1,"task_id":"0123456789abcdef0123456789abcdef","queue_id":"0123456789abcdef0123456789abcdef","state":"CANCELLED","revision":"2","effect_uncertain":false},"pad":"` + strings.Repeat("x", 40) + `"}`

// peer is Watermill SQL on its own database of the run's server.
type peer struct {
	e     *env
	pool  *stdsql.DB
	log   watermill.LoggerAdapter
	quiet *atomic.Bool
}

// quietLogger drops Watermill's errors while a subscriber is being stopped
// on purpose, which it reports as failed queries.
type quietLogger struct {
	watermill.LoggerAdapter
	quiet *atomic.Bool
}

func (l quietLogger) Error(msg string, err error, fields watermill.LogFields) {
	if !l.quiet.Load() {
		l.LoggerAdapter.Error(msg, err, fields)
	}
}

func (l quietLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return quietLogger{LoggerAdapter: l.LoggerAdapter.With(fields), quiet: l.quiet}
}

func newPeer(ctx context.Context, e *env) (*peer, error) {
	if _, err := e.admin.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS `"+peerDatabase+"`"); err != nil {
		return nil, err
	}
	pool, err := stdsql.Open("mysql", e.mysql.DSN(peerDatabase))
	if err != nil {
		return nil, err
	}
	pool.SetMaxOpenConns(peerPublishers + 2)
	pool.SetMaxIdleConns(peerPublishers + 2)
	quiet := &atomic.Bool{}
	return &peer{e: e, pool: pool, log: quietLogger{LoggerAdapter: watermill.NewSlogLogger(e.log), quiet: quiet}, quiet: quiet}, nil
}

func (p *peer) close() { p.pool.Close() }

// schema is the MySQL schema adapter at a subscribe batch size.
func schema(batch int) wsql.DefaultMySQLSchema {
	return wsql.DefaultMySQLSchema{SubscribeBatchSize: batch}
}

// publish publishes n messages to the topic with peerPublishers concurrent
// publishers, one message per Publish call (one autocommit INSERT each).
func (p *peer) publish(ctx context.Context, n int) (*peerPublish, error) {
	// The subscriber side creates the messages and offsets tables before
	// the clock starts.
	sub, err := p.subscriber(1, "init")
	if err != nil {
		return nil, err
	}
	err = sub.SubscribeInitialize(peerTopic)
	sub.Close()
	if err != nil {
		return nil, fmt.Errorf("watermill: initialize schema: %w", err)
	}
	pub, err := wsql.NewPublisher(wsql.BeginnerFromStdSQL(p.pool), wsql.PublisherConfig{SchemaAdapter: schema(1)}, p.log)
	if err != nil {
		return nil, fmt.Errorf("watermill publisher: %w", err)
	}
	defer pub.Close()
	before, err := p.e.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var pubErr atomic.Value
	for range peerPublishers {
		wg.Go(func() {
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				if err := pub.Publish(peerTopic, message.NewMessage(watermill.NewUUID(), message.Payload(peerPayload))); err != nil {
					pubErr.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := pubErr.Load().(error); err != nil {
		return nil, fmt.Errorf("watermill publish: %w", err)
	}
	after, err := p.e.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	c := before.to(after)
	return &peerPublish{Messages: n, Rate: float64(n) / c.Elapsed.Seconds(), Cost: c}, nil
}

func (p *peer) subscriber(batch int, group string) (*wsql.Subscriber, error) {
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromStdSQL(p.pool), wsql.SubscriberConfig{
		ConsumerGroup: group, SchemaAdapter: schema(batch), OffsetsAdapter: wsql.DefaultMySQLOffsetsAdapter{},
		InitializeSchema: true,
	}, p.log)
	if err != nil {
		return nil, fmt.Errorf("watermill subscriber: %w", err)
	}
	return sub, nil
}

// consume reads and acks the n published messages with one subscriber of a
// new consumer group at the given batch size. It stops after capTime; the
// rate is then over the messages consumed so far.
func (p *peer) consume(ctx context.Context, batch, n int, capTime time.Duration) (*peerResult, error) {
	res := &peerResult{Batch: batch, Group: fmt.Sprintf("batch-%d", batch), Messages: n}
	var lastOffset int64
	if err := p.pool.QueryRowContext(ctx, "SELECT MAX(`offset`) FROM `watermill_"+peerTopic+"`").Scan(&lastOffset); err != nil {
		return nil, err
	}
	sub, err := p.subscriber(batch, res.Group)
	if err != nil {
		return nil, err
	}
	defer func() {
		p.quiet.Store(true)
		sub.Close()
		p.quiet.Store(false)
	}()
	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	before, err := p.e.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	msgs, err := sub.Subscribe(subCtx, peerTopic)
	if err != nil {
		return nil, fmt.Errorf("watermill subscribe: %w", err)
	}
	deadline := time.NewTimer(capTime)
	defer deadline.Stop()
	res.Complete = true
consume:
	for res.Consumed < n {
		select {
		case m, ok := <-msgs:
			if !ok {
				return nil, fmt.Errorf("watermill: subscription ended after %d messages", res.Consumed)
			}
			m.Ack()
			res.Consumed++
		case <-deadline.C:
			res.Complete = false
			p.quiet.Store(true)
			break consume
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if res.Complete {
		// An ack is durable once its batch's offset is committed.
		q := "SELECT COALESCE(MAX(offset_acked), 0) FROM `watermill_offsets_" + peerTopic + "` WHERE consumer_group = ?"
		if err := waitFor(ctx, 30*time.Second, time.Millisecond, "watermill offset commit", func() (bool, error) {
			var acked int64
			err := p.pool.QueryRowContext(ctx, q, res.Group).Scan(&acked)
			return acked >= lastOffset, err
		}); err != nil {
			return nil, err
		}
	}
	after, err := p.e.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	res.Cost = before.to(after)
	res.Elapsed = res.Cost.Elapsed
	res.Rate = float64(res.Consumed) / res.Elapsed.Seconds()
	return res, nil
}
