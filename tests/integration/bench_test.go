package integration_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitrun/orbit/examples/result-inbox/inbox"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/modules/tasks"
)

// BenchmarkApply measures the events per second that inbox.Store.Apply
// commits on orbit_receiver_test, with 1 and with 4 appliers sharing one
// Store (as consume's handlers do). Every event is distinct and first seen,
// so each one runs the whole transaction: the Inbox INSERT, the view's
// INSERT … ON DUPLICATE KEY, its locking read, its UPDATE and the applied
// flag. The events are one real task.cancelled event from modules/tasks
// with new event and task ids.
func BenchmarkApply(b *testing.B) {
	queueID, real := benchEvent(b)
	for _, appliers := range []int{1, 4} {
		b.Run(fmt.Sprintf("Appliers%d", appliers), func(b *testing.B) {
			store, err := inbox.NewStore(env.receiver, newConsumer(), queueID)
			if err != nil {
				b.Fatal(err)
			}
			events := make([][]byte, b.N)
			for i := range events {
				events[i] = renamed(b, real)
			}
			ctx := context.Background()
			var (
				next   atomic.Int64
				failed atomic.Value
				wg     sync.WaitGroup
			)
			b.ResetTimer()
			for range appliers {
				wg.Go(func() {
					for {
						i := next.Add(1) - 1
						if i >= int64(len(events)) {
							return
						}
						res, err := store.Apply(ctx, events[i])
						if err != nil || !res.Applied || res.Duplicate {
							failed.Store(fmt.Errorf("event %d: %+v, %v", i, res, err))
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			if err, _ := failed.Load().(error); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// benchEvent cancels a task of a new queue on orbit_test and returns the
// queue and its task.cancelled event as a subscriber receives it.
func benchEvent(b *testing.B) (queueID string, raw []byte) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	queueID = db.NewID()
	var ev *tasks.Event
	err := db.Tx(ctx, env.platform, func(tx *sql.Tx) error {
		task, err := tasks.TaskInsert(ctx, tx, &tasks.TaskInsertParams{
			NamespaceID: db.NewID(), QueueID: queueID, CredentialID: db.NewID(),
			Input: []byte(`{"order":"bench"}`), MaxAttempts: 1,
		})
		if err != nil {
			return err
		}
		_, ev, err = tasks.TaskCancel(ctx, tx, task.ID, "")
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	stored, err := tasks.EventGet(ctx, env.platform, queueID, ev.ID)
	if err != nil {
		b.Fatal(err)
	}
	if raw, err = json.Marshal(stored); err != nil {
		b.Fatal(err)
	}
	return queueID, raw
}

// renamed returns raw as the result of another task: new event and task
// ids, everything else (numbers' text included) as it was.
func renamed(b *testing.B, raw []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var ev map[string]any
	if err := dec.Decode(&ev); err != nil {
		b.Fatal(err)
	}
	taskID := db.NewID()
	ev["id"] = db.NewID()
	ev["aggregate_id"] = taskID
	snapshot, ok := ev["snapshot"].(map[string]any)
	if !ok {
		b.Fatalf("event without a snapshot: %s", raw)
	}
	snapshot["task_id"] = taskID
	out, err := json.Marshal(ev)
	if err != nil {
		b.Fatal(err)
	}
	return out
}
