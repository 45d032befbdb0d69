package bg

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStopCancelsAndWaits(t *testing.T) {
	var g Group
	stopped := make(chan struct{})
	g.Go(func(ctx context.Context) { <-ctx.Done(); close(stopped) })
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stopped:
	default:
		t.Fatal("Stop returned before the goroutine ended")
	}
	if err := g.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	g.Go(func(context.Context) { t.Error("Go after Stop must not run") })
}

func TestStopWithoutGo(t *testing.T) {
	var g Group
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestStopIsBoundedByItsContext(t *testing.T) {
	var g Group
	release := make(chan struct{})
	g.Go(func(context.Context) { <-release })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := g.Stop(ctx); err == nil {
		t.Fatal("Stop must give up when its context ends")
	}
	close(release)
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}
