//go:build soak

package soak_test

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitrun/orbit/cmd/orbit/server"
	"github.com/orbitrun/orbit/config"
	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
	"github.com/orbitrun/orbit/modules"
	"github.com/orbitrun/orbit/modules/admin"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

var (
	flagDuration = flag.Duration("soak.duration", 10*time.Minute, "how long the consumers stay connected under load")
	flagWarmup   = flag.Duration("soak.warmup", 0, "time before the first measurement; 0 means a tenth of the duration, at least 30 s")
	flagRate     = flag.Int("soak.rate", 50, "results produced per second (tasks submitted and cancelled)")
)

const (
	consumers     = 128
	subscriptions = 8 // 16 consumers each
	// flatWithin is how far the end may be from the measurement after
	// warm-up (F-5).
	flatWithin = 0.10
)

// sample is one measurement of the process.
type sample struct {
	at         time.Duration
	goroutines int
	rssKiB     int
	acked      uint64
}

// TestF5_Soak128Consumers runs a server in this process with 128 SDK
// EventConsumers (16 on each of 8 subscriptions) while results are
// produced at a steady rate, and measures the process's goroutines and RSS
// after warm-up and at the end: each must be within 10 % of its value
// after warm-up. Every result must have reached every subscription.
func TestF5_Soak128Consumers(t *testing.T) {
	duration := *flagDuration
	warmup := *flagWarmup
	if warmup == 0 {
		warmup = max(duration/10, 30*time.Second)
	}
	url, token, queueID := startServer(t)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 30 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	client, err := orbit.NewClient(url, token, orbit.WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var subIDs []string
	for i := range subscriptions {
		res, err := client.CreateSubscription(ctx, fmt.Sprintf("soak:%d", i), orbit.CreateSubscriptionRequest{
			Name: fmt.Sprintf("soak-%d", i), QueueID: queueID, Types: []string{orbit.EventTypeTaskCancelled}, MaxPending: 1000,
		})
		if err != nil {
			t.Fatal(err)
		}
		subIDs = append(subIDs, res.Subscription.ID)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var acked atomic.Uint64
	var wg sync.WaitGroup
	runErrs := make(chan error, consumers)
	for i := range consumers {
		c, err := orbit.NewEventConsumer(orbit.EventConsumerConfig{
			BaseURL: url, Token: token, SubscriptionID: subIDs[i%subscriptions], Capacity: 4, Logger: quiet,
		}, func(context.Context, *orbit.Delivery) error {
			acked.Add(1)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			runErrs <- c.Run(ctx)
		}()
	}

	var produced atomic.Int64
	var produceErr atomic.Value
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second / time.Duration(*flagRate))
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if err := produce(ctx, client, queueID, n); err != nil {
				if ctx.Err() == nil {
					produceErr.Store(err)
				}
				return
			}
			produced.Add(1)
		}
	}()

	start := time.Now()
	// The goroutines of claims, batches and requests in flight come and go
	// by the hundred under this load: the settled count is the least of a
	// few counts a moment apart, which one unlucky instant cannot inflate.
	measure := func() sample {
		settled := runtime.NumGoroutine()
		for range 4 {
			time.Sleep(250 * time.Millisecond)
			settled = min(settled, runtime.NumGoroutine())
		}
		runtime.GC()
		debug.FreeOSMemory()
		return sample{at: time.Since(start), goroutines: settled, rssKiB: rssKiB(t), acked: acked.Load()}
	}
	time.Sleep(warmup)
	warm := measure()
	t.Logf("after warm-up  %s: goroutines %d, RSS %d KiB, %d deliveries handled", warm.at.Round(time.Second), warm.goroutines, warm.rssKiB, warm.acked)
	peak := warm
	for time.Since(start) < duration {
		time.Sleep(min(time.Minute, duration-time.Since(start)))
		s := measure()
		peak.goroutines, peak.rssKiB = max(peak.goroutines, s.goroutines), max(peak.rssKiB, s.rssKiB)
		t.Logf("at %s: goroutines %d, RSS %d KiB, %d deliveries handled", s.at.Round(time.Second), s.goroutines, s.rssKiB, s.acked)
	}
	end := measure()
	if err, _ := produceErr.Load().(error); err != nil {
		t.Fatalf("producing results: %v", err)
	}
	want := uint64(produced.Load()) * subscriptions
	for deadline := time.Now().Add(time.Minute); acked.Load() < want && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	close(runErrs)
	for err := range runErrs {
		if err != nil {
			t.Errorf("consumer Run: %v", err)
		}
	}
	if acked.Load() < want {
		t.Errorf("%d deliveries handled of %d results × %d subscriptions", acked.Load(), produced.Load(), subscriptions)
	}
	g := change(warm.goroutines, end.goroutines)
	r := change(warm.rssKiB, end.rssKiB)
	report := fmt.Sprintf("soak %s (warm-up %s), %d consumers on %d subscriptions, %d results/s: %d results, %d deliveries handled\n"+
		"goroutines after warm-up %d, at the end %d (%+.1f %%), peak %d\nRSS after warm-up %d KiB, at the end %d KiB (%+.1f %%), peak %d KiB",
		duration, warmup, consumers, subscriptions, *flagRate, produced.Load(), acked.Load(),
		warm.goroutines, end.goroutines, 100*g, peak.goroutines, warm.rssKiB, end.rssKiB, 100*r, peak.rssKiB)
	fmt.Println(report)
	if g > flatWithin || g < -flatWithin || r > flatWithin || r < -flatWithin {
		t.Errorf("not flat within %.0f %% after warm-up:\n%s", 100*flatWithin, report)
	}
}

// startServer runs an Orbit server in this process on a fresh database,
// as servertest does but with its log discarded: servertest keeps every
// log line in memory, which would grow the RSS this test measures. It
// returns the server's URL and a token with every permission on a queue.
func startServer(t *testing.T) (url, token, queueID string) {
	pool := testdb.New(t)
	cfg := config.Default()
	in := modules.NewInstances()
	if err := in.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	srv, err := server.New(ctx, server.Params{Config: cfg, DB: pool, Logger: slog.New(slog.DiscardHandler), Instances: in})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.StartModules(ctx); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(nil)
	hs.Config = srv.HTTPServer()
	hs.Listener = srv.Listener(hs.Listener)
	hs.Start()
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Stop(stopCtx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	store := admin.NewStore(pool)
	sc, err := store.ScopeEnsure(ctx, &admin.ScopeEnsureParams{Namespace: "soak", Application: "soak", Environment: "soak", Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	_, token, err = store.CredentialCreate(ctx, &admin.CredentialCreateParams{
		NamespaceID: sc.NamespaceID, ApplicationID: sc.ApplicationID, EnvironmentID: sc.EnvironmentID,
		Permissions: auth.AllPermissions, Queues: []string{sc.QueueID},
	})
	if err != nil {
		t.Fatal(err)
	}
	return hs.URL, token, sc.QueueID
}

// produce appends one task.cancelled result: it submits a task and cancels
// it while it waits.
func produce(ctx context.Context, client *orbit.Client, queueID string, n int) error {
	res, err := client.SubmitTask(ctx, fmt.Sprintf("soak-%d", n), orbit.SubmitTaskRequest{QueueID: queueID, Input: json.RawMessage(`{}`)})
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	if _, err := client.CancelTask(ctx, res.Task.ID, fmt.Sprintf("soak-cancel-%d", n), orbit.CancelTaskRequest{}); err != nil {
		return fmt.Errorf("cancel: %w", err)
	}
	return nil
}

func change(from, to int) float64 { return float64(to-from) / float64(from) }

// rssKiB reads the process's resident set size from /proc.
func rssKiB(t *testing.T) int {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}
