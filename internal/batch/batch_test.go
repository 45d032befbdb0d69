package batch

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

func TestRecordHandsEachRequestItsOutcomeOrTheCallsError(t *testing.T) {
	t.Parallel()
	var got []string
	requests := func() []*Request[int, string] {
		got = make([]string, 3)
		var out []*Request[int, string]
		for i := range 3 {
			out = append(out, &Request[int, string]{Params: i * 10, Done: func(o string, err error) {
				if err != nil {
					o = "error: " + err.Error()
				}
				got[i] = o
			}})
		}
		return out
	}
	Record(requests(), time.Second, func(ctx context.Context, params []*int) ([]string, error) {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("record's context has no deadline")
		}
		var out []string
		for _, p := range params {
			out = append(out, fmt.Sprint(*p))
		}
		return out, nil
	})
	if want := []string{"0", "10", "20"}; !slices.Equal(got, want) {
		t.Errorf("outcomes %q, want %q", got, want)
	}
	Record(requests(), time.Second, func(context.Context, []*int) ([]string, error) {
		return nil, errors.New("down")
	})
	if want := []string{"error: down", "error: down", "error: down"}; !slices.Equal(got, want) {
		t.Errorf("outcomes %q, want %q", got, want)
	}
}
