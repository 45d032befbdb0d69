// Package bg runs a module's background loops: started together, stopped
// together, and waited for within a bound.
package bg

import (
	"context"
	"sync"
	"time"
)

// Group owns goroutines started with Go. The zero value is ready to use.
type Group struct {
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Go runs fn in a goroutine owned by g. fn must return soon after its
// context is cancelled. Go after Stop runs nothing.
func (g *Group) Go(fn func(ctx context.Context)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ctx == nil {
		g.ctx, g.cancel = context.WithCancel(context.Background())
	}
	if g.ctx.Err() != nil {
		return
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		fn(g.ctx)
	}()
}

// Stop cancels the goroutines' context and waits for them until ctx ends,
// whose error it then returns. It is idempotent and safe without Go.
func (g *Group) Stop(ctx context.Context) error {
	g.mu.Lock()
	if g.ctx == nil {
		g.ctx, g.cancel = context.WithCancel(context.Background())
	}
	g.cancel()
	g.mu.Unlock()
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Every runs work at once and then every interval until ctx ends. It is a
// loop body for Go.
func Every(ctx context.Context, interval time.Duration, work func(ctx context.Context)) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			work(ctx)
		}
	}
}
