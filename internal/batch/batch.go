// Package batch gathers requests that arrive together into batches, so that
// a server can record many of them in one database transaction (group
// commit) while each caller still gets its own answer after that commit.
package batch

import (
	"context"
	"sync"
	"time"
)

// Batcher hands queued requests to run, at most max at a time, from at
// most flushers goroutines at once. While those run, new requests queue up
// and form the next batch, so the batch size follows the load: one request
// alone is run at once, a burst shares one run. Flusher goroutines exist
// only while requests wait.
type Batcher[R any] struct {
	run           func([]R)
	flushers, max int

	mu       sync.Mutex
	queue    []R
	flushing int
	running  sync.WaitGroup
}

// New returns a Batcher that calls run with batches of 1 to max requests
// from up to flushers goroutines. run must answer every request it is
// given.
func New[R any](flushers, max int, run func([]R)) *Batcher[R] {
	return &Batcher[R]{run: run, flushers: flushers, max: max}
}

// Submit queues r; it never blocks on run.
func (b *Batcher[R]) Submit(r R) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.queue = append(b.queue, r)
	if b.flushing < b.flushers {
		b.flushing++
		b.running.Add(1)
		go b.flush()
	}
}

// flush runs queued requests batch by batch until none wait.
func (b *Batcher[R]) flush() {
	defer b.running.Done()
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.flushing--
			b.mu.Unlock()
			return
		}
		n := min(len(b.queue), b.max)
		next := make([]R, n)
		copy(next, b.queue)
		clear(b.queue[:n])
		b.queue = b.queue[n:]
		b.mu.Unlock()
		b.run(next)
	}
}

// Wait returns once no request waits or runs, or with ctx's error.
func (b *Batcher[R]) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { b.running.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Waiting bounds the requests one client (a connection) has waiting in a
// Batcher and writes their answers apart from the batch, so that a client
// slow to take its answers never holds up those of the others. Use
// NewWaiting.
type Waiting struct {
	slots    chan struct{}
	answered sync.WaitGroup
}

// NewWaiting returns a Waiting that admits up to max requests at once.
func NewWaiting(max int) *Waiting {
	return &Waiting{slots: make(chan struct{}, max)}
}

// Reserve waits for room for one more request and returns true, or returns
// false when ctx ends first. Every true must be followed by one Answer.
func (w *Waiting) Reserve(ctx context.Context) bool {
	select {
	case w.slots <- struct{}{}:
		w.answered.Add(1)
		return true
	case <-ctx.Done():
		return false
	}
}

// Answer runs answer in a goroutine of its own and then frees the room of
// its request. It never blocks, so a Batcher's run may call it.
func (w *Waiting) Answer(answer func()) {
	go func() {
		defer w.answered.Done()
		defer func() { <-w.slots }()
		answer()
	}()
}

// Wait returns once every reserved request has been answered.
func (w *Waiting) Wait() { w.answered.Wait() }

// Request is one request of a Batcher whose run records the whole batch
// with one call (one transaction). Done receives the request's outcome, or
// the error of that call; it runs on the batch's goroutine and must not
// block.
type Request[P, O any] struct {
	Params P
	Done   func(O, error)
}

// Record calls record once with the params of every request, bounded by
// timeout, and hands each request its outcome, or record's error to all of
// them. The call is not tied to any client: a request is recorded even
// when its client went away meanwhile, so a later repeat finds it.
func Record[P, O any](requests []*Request[P, O], timeout time.Duration, record func(context.Context, []*P) ([]O, error)) {
	params := make([]*P, len(requests))
	for i, r := range requests {
		params[i] = &r.Params
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	outcomes, err := record(ctx, params)
	cancel()
	for i, r := range requests {
		var o O
		if err == nil {
			o = outcomes[i]
		}
		r.Done(o, err)
	}
}
