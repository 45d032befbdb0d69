package tasks_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
	"github.com/orbitrun/orbit/modules/admin"
	"github.com/orbitrun/orbit/modules/tasks"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

// benchWaitTimeout bounds every wait of a benchmark, so that a stuck run
// fails instead of hanging.
const benchWaitTimeout = 2 * time.Minute

// BenchmarkSubmitToComplete measures tasks per second from submission over
// HTTP, with the SDK's client, to completion by SDK workers: four workers of
// capacity 8 on one queue, and eight goroutines submitting. The clock runs
// from the first submission until the queue's result log holds an event for
// every task; the server and the workers are started before it.
func BenchmarkSubmitToComplete(b *testing.B) {
	const (
		workerN    = 4
		capacity   = 8
		submitters = 8
	)
	srv := servertest.Start(b)
	cred := srv.Credential(b, servertest.CredentialParams{
		Permissions: []string{auth.PermTasksSubmit, auth.PermTasksWork},
	})
	m := srv.Instances["tasks"].(*tasks.Module)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: submitters}}
	b.Cleanup(hc.CloseIdleConnections)
	client, err := orbit.NewClient(srv.URL, cred.Token, orbit.WithHTTPClient(hc))
	if err != nil {
		b.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	b.Cleanup(func() {
		cancel()
		running.Wait()
	})
	for i := range workerN {
		w, err := orbit.NewWorker(orbit.WorkerConfig{
			BaseURL: srv.URL, Token: cred.Token, QueueID: cred.QueueID, Capacity: capacity,
			WorkerName: fmt.Sprintf("bench-%d", i), Logger: slog.New(slog.DiscardHandler),
		}, func(context.Context, *orbit.AssignedTask) orbit.Outcome {
			return orbit.Succeeded(json.RawMessage(`{"ok":true}`))
		})
		if err != nil {
			b.Fatal(err)
		}
		running.Add(1)
		go func() {
			defer running.Done()
			if err := w.Run(ctx); err != nil {
				b.Errorf("worker: %v", err)
			}
		}()
	}
	benchWaitSessions(b, srv.DB, cred.QueueID, workerN)

	b.ResetTimer()
	start := time.Now()
	var next atomic.Int64
	var submitting sync.WaitGroup
	for range submitters {
		submitting.Add(1)
		go func() {
			defer submitting.Done()
			for i := next.Add(1) - 1; i < int64(b.N); i = next.Add(1) - 1 {
				_, err := client.SubmitTask(ctx, fmt.Sprintf("bench-%d", i), orbit.SubmitTaskRequest{
					QueueID: cred.QueueID, Input: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)),
				})
				if err != nil {
					b.Errorf("submit: %v", err)
					return
				}
			}
		}()
	}
	submitting.Wait()
	if b.Failed() {
		b.FailNow()
	}
	benchWaitHead(b, m, srv.DB, cred.QueueID, uint64(b.N))
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "tasks/s")
}

// benchWaitSessions waits, polling the database, until n worker sessions of
// the queue are open.
func benchWaitSessions(b *testing.B, pool *sql.DB, queueID string, n int) {
	b.Helper()
	deadline := time.Now().Add(benchWaitTimeout)
	ticker := time.NewTicker(10 * time.Millisecond)
	defer ticker.Stop()
	for {
		var open int
		err := pool.QueryRow(`SELECT COUNT(*) FROM worker_sessions WHERE queue_id = ? AND closed_at IS NULL`, queueID).Scan(&open)
		if err != nil {
			b.Fatal(err)
		}
		if open >= n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d workers connected", open, n)
		}
		<-ticker.C
	}
}

// benchWaitHead waits until the committed head of a queue's log reaches
// want, woken by the tasks module after every append.
func benchWaitHead(b *testing.B, m *tasks.Module, pool *sql.DB, queueID string, want uint64) {
	b.Helper()
	deadline := time.NewTimer(benchWaitTimeout)
	defer deadline.Stop()
	for {
		woken := m.Appended()
		s, err := tasks.StreamGet(context.Background(), pool, queueID)
		if err != nil {
			b.Fatal(err)
		}
		if s.Head >= want {
			return
		}
		select {
		case <-woken:
		case <-deadline.C:
			b.Fatalf("result log head %d, want %d", s.Head, want)
		}
	}
}

// BenchmarkResultLogAppend measures result-log appends per second at the
// store: sixteen goroutines complete leased tasks, each completion appending
// one event to its queue's log in the completion's transaction. Appends to
// one queue are serialised by its head row; with four queues they spread
// over four heads. The tasks are inserted and leased before the clock starts.
func BenchmarkResultLogAppend(b *testing.B) {
	for _, queueN := range []int{1, 4} {
		b.Run(fmt.Sprintf("Queues%d", queueN), func(b *testing.B) { benchmarkAppend(b, queueN) })
	}
}

func benchmarkAppend(b *testing.B, queueN int) {
	const (
		completers  = 16
		insertBatch = 500
	)
	ctx := context.Background()
	pool := testdb.New(b)
	store := tasks.NewStore(pool, admin.NewStore(pool), time.Second, time.Minute)
	var scope admin.Scope
	queues := make([]string, queueN)
	for q := range queues {
		sc, err := admin.NewStore(pool).ScopeEnsure(ctx, &admin.ScopeEnsureParams{
			Namespace: "ns", Application: "app", Environment: "env", Queue: fmt.Sprintf("q%d", q),
		})
		if err != nil {
			b.Fatal(err)
		}
		scope, queues[q] = sc, sc.QueueID
	}
	namespaceID := scope.NamespaceID
	worker, _, err := admin.NewStore(pool).CredentialCreate(ctx, &admin.CredentialCreateParams{
		NamespaceID: scope.NamespaceID, ApplicationID: scope.ApplicationID, EnvironmentID: scope.EnvironmentID,
		Label: "worker", Permissions: []string{auth.PermTasksWork}, Queues: queues,
	})
	if err != nil {
		b.Fatal(err)
	}
	grant := func(queue string) auth.Grant {
		return auth.Grant{CredentialID: worker.ID, Permission: auth.PermTasksWork, QueueID: queue, What: "queue"}
	}
	perQueue := make([]int, queueN)
	for first := 0; first < b.N; first += insertBatch {
		err := db.Tx(ctx, pool, func(tx *sql.Tx) error {
			for i := first; i < min(first+insertBatch, b.N); i++ {
				if _, err := tasks.TaskInsert(ctx, tx, &tasks.TaskInsertParams{
					NamespaceID: namespaceID, QueueID: queues[i%queueN], CredentialID: "bench",
					Input: []byte(`{"n":1}`), MaxAttempts: 1,
				}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	for i := range b.N {
		perQueue[i%queueN]++
	}
	assigned := make(chan tasks.Assignment, b.N)
	for q, queueID := range queues {
		session, err := store.WorkerSessionOpen(ctx, &tasks.WorkerSessionOpenParams{QueueID: queueID, CredentialID: "bench", Capacity: perQueue[q]})
		if err != nil {
			b.Fatal(err)
		}
		got, _, err := store.AttemptLease(ctx, session, grant(queueID), time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		if len(got) != perQueue[q] {
			b.Fatalf("leased %d tasks of queue %d, want %d", len(got), q, perQueue[q])
		}
		for _, a := range got {
			assigned <- a
		}
	}
	close(assigned)

	b.ResetTimer()
	var wg sync.WaitGroup
	for range completers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a := range assigned {
				_, ev, err := store.AttemptComplete(ctx, &tasks.AttemptCompleteParams{
					Grant:   grant(a.Task.QueueID),
					Proof:   tasks.Proof{TaskID: a.Task.ID, AttemptID: a.AttemptID, Epoch: a.Epoch, LeaseSecret: a.LeaseSecret},
					Outcome: tasks.OutcomeSucceeded, Result: []byte(`{"ok":true}`),
				})
				if err != nil || ev == nil {
					b.Errorf("complete: event %v, %v", ev, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")

	for q, queueID := range queues {
		s, err := tasks.StreamGet(ctx, pool, queueID)
		if err != nil {
			b.Fatal(err)
		}
		if s.Head != uint64(perQueue[q]) {
			b.Errorf("queue %d: head %d, want %d", q, s.Head, perQueue[q])
		}
	}
}
