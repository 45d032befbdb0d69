package acceptance_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/modules/tasks"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

// waitForHead waits until the committed head of a queue's result log reaches
// want, woken by the tasks module after every append, and fails the test
// after timeout.
func waitForHead(t testing.TB, m *tasks.Module, pool *sql.DB, queueID string, want uint64, timeout time.Duration) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		woken := m.Appended()
		s, err := tasks.StreamGet(context.Background(), pool, queueID)
		if err != nil {
			t.Fatal(err)
		}
		if s.Head >= want {
			return
		}
		select {
		case <-woken:
		case <-deadline.C:
			t.Fatalf("after %s the result log's head is %d, want %d (tasks by state: %v)", timeout, s.Head, want, stateCounts(t, pool, queueID))
		}
	}
}

// submitAll submits n idempotent tasks with input {"i": i} from submitters
// goroutines and returns when all are accepted.
func submitAll(t testing.TB, client *orbit.Client, queueID, keyPrefix string, n, submitters int) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				_, err := client.SubmitTask(context.Background(), fmt.Sprintf("%s-%d", keyPrefix, i), orbit.SubmitTaskRequest{
					QueueID: queueID, Input: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), Idempotent: true,
				})
				if err != nil {
					t.Errorf("submit task %d: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestT4_FourWorkersTwoThousandTasks runs four SDK workers on one queue while
// 2,000 tasks are submitted over HTTP, and checks in the database that every
// task was leased once and completed once, and that the result log holds one
// task.succeeded per task at sequences 1 … 2,000 (T-4, T-5, T-8, T-9).
func TestT4_FourWorkersTwoThousandTasks(t *testing.T) {
	t.Parallel()
	const (
		total      = 2000
		workerN    = 4
		capacity   = 4
		submitters = 8
	)
	srv := servertest.Start(t)
	cred := srv.Credential(t, servertest.CredentialParams{
		Permissions: []string{auth.PermTasksSubmit, auth.PermTasksRead, auth.PermTasksWork},
	})
	tasksModule := srv.Instances["tasks"].(*tasks.Module)

	var (
		calls atomic.Int64
		mu    sync.Mutex
		seen  = make(map[string]int, total)
	)
	wlog := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker log:\n%s", wlog)
		}
	})
	ws := startWorkers(t, workerN, orbit.WorkerConfig{
		BaseURL: srv.URL, Token: cred.Token, QueueID: cred.QueueID, Capacity: capacity,
		Logger: slog.New(slog.NewTextHandler(wlog, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, func(_ context.Context, task *orbit.AssignedTask) orbit.Outcome {
		calls.Add(1)
		mu.Lock()
		seen[task.ID]++
		mu.Unlock()
		return orbit.Succeeded(task.Input)
	})

	start := time.Now()
	client, err := orbit.NewClient(srv.URL, cred.Token, orbit.WithHTTPClient(newHTTPClient(t, submitters)))
	if err != nil {
		t.Fatal(err)
	}
	submitAll(t, client, cred.QueueID, "t4", total, submitters)
	if t.Failed() {
		t.FailNow()
	}
	submitted := time.Since(start)
	// The bound is generous: on an idle 2-core machine the run takes
	// about 15 s with the race detector, but a loaded one may need several
	// times that.
	waitForHead(t, tasksModule, srv.DB, cred.QueueID, total, 3*time.Minute)
	t.Logf("%d tasks submitted in %s, all completed after %s", total, submitted.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	ws.stop(t)

	if n := calls.Load(); n != total {
		t.Errorf("handlers ran %d times, want %d", n, total)
	}
	mu.Lock()
	for id, n := range seen {
		if n != 1 {
			t.Errorf("task %s was handled %d times", id, n)
		}
	}
	handled := len(seen)
	mu.Unlock()
	if handled != total {
		t.Errorf("handlers saw %d distinct tasks, want %d", handled, total)
	}

	checkSucceededOnce(t, srv.DB, cred.QueueID, total)
	for _, r := range queueTasks(t, srv.DB, cred.QueueID) {
		if r.revision != 3 || r.attempts != 1 {
			t.Errorf("task %s: revision %d, attempts %d; want revision 3 (PENDING, RUNNING, SUCCEEDED) and one attempt", r.id, r.revision, r.attempts)
		}
	}
	for id, states := range attemptCounts(t, srv.DB, cred.QueueID) {
		if len(states) != 1 || states["COMPLETED"] != 1 {
			t.Errorf("task %s has attempts %v, want exactly one, COMPLETED", id, states)
		}
	}
	events := queueEvents(t, srv.DB, cred.QueueID)
	if len(events) != total {
		t.Errorf("result log holds %d events, want %d", len(events), total)
	}
	for _, e := range events {
		if e.typ != "task.succeeded" || e.revision != 3 {
			t.Errorf("sequence %d: %s at revision %d, want task.succeeded at revision 3", e.sequence, e.typ, e.revision)
		}
	}
	s, err := tasks.StreamGet(context.Background(), srv.DB, cred.QueueID)
	if err != nil {
		t.Fatal(err)
	}
	if s.Head != total {
		t.Errorf("queue_streams head = %d, want %d", s.Head, total)
	}
}
