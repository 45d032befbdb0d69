package batch

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestEveryRequestRunsOnceWithinTheBounds(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		seen    = map[int]int{}
		running int
		most    int
		largest int
	)
	release := make(chan struct{})
	b := New(2, 8, func(batch []int) {
		mu.Lock()
		running++
		most = max(most, running)
		largest = max(largest, len(batch))
		for _, r := range batch {
			seen[r]++
		}
		mu.Unlock()
		<-release
		mu.Lock()
		running--
		mu.Unlock()
	})
	const n = 100
	for i := range n {
		b.Submit(i)
	}
	close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if len(seen) != n {
		t.Fatalf("%d distinct requests ran, want %d", len(seen), n)
	}
	for r, times := range seen {
		if times != 1 {
			t.Errorf("request %d ran %d times", r, times)
		}
	}
	if most > 2 || largest > 8 {
		t.Errorf("at most %d runs at once and %d per batch, want ≤ 2 and ≤ 8", most, largest)
	}
	if largest < 2 {
		t.Errorf("requests queued during a run were not batched: largest batch %d", largest)
	}
}

func TestWaitIsBoundedByItsContext(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	b := New(1, 1, func([]int) { <-release })
	b.Submit(1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := b.Wait(ctx); err == nil {
		t.Fatal("Wait returned while a batch was still running")
	}
	close(release)
	if err := b.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestWaitingBoundsRequestsUntilAnswered(t *testing.T) {
	t.Parallel()
	w := NewWaiting(2)
	ctx := context.Background()
	if !w.Reserve(ctx) || !w.Reserve(ctx) {
		t.Fatal("Reserve refused room below the bound")
	}
	full, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if w.Reserve(full) {
		t.Fatal("Reserve admitted a third request with a bound of 2")
	}
	release := make(chan struct{})
	w.Answer(func() { <-release })
	w.Answer(func() {})
	if !w.Reserve(ctx) {
		t.Fatal("an answered request did not free its room")
	}
	w.Answer(func() {})
	close(release)
	w.Wait()
}
