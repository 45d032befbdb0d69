package tasks

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/metrics"
)

// QueueNamespaces is what the tasks module's metrics need of the admin
// module: the namespace of every queue, read through q. The admin module
// offers it.
type QueueNamespaces interface {
	QueueNamespaces(ctx context.Context, q auth.Querier, limit int) (map[string]string, error)
}

const (
	// metricsMaxQueues bounds the queues the gauges cover, in id order.
	metricsMaxQueues = 10_000
	// metricsCountCap bounds each count of orbit_tasks: a state with more
	// tasks shows the cap. The count reads at most this many index entries.
	metricsCountCap = 100_000
	// streamsChunk is how many queues one read of their log heads covers.
	streamsChunk = 500
)

// liveStates are the states orbit_tasks counts: the work that exists now.
// The final states grow without bound; orbit_task_results_total counts
// them as they happen.
var liveStates = []string{StatePending, StateRunning, StateNeedsReview}

// taskMetrics are the tasks module's metrics. A nil *taskMetrics counts
// nothing.
type taskMetrics struct {
	submitted     *prometheus.CounterVec
	results       *prometheus.CounterVec
	leaseExpiries *prometheus.CounterVec
	sequencing    prometheus.Histogram

	tasks      *metrics.Snapshot
	oldestAge  *metrics.Snapshot
	head       *metrics.Snapshot
	retained   *metrics.Snapshot
	namespaces QueueNamespaces
}

func newTaskMetrics(reg *metrics.Registry, namespaces QueueNamespaces) *taskMetrics {
	return &taskMetrics{
		submitted: reg.CounterVec("tasks_submitted_total", "Tasks submitted, by queue.", "queue", "namespace"),
		results: reg.CounterVec("task_results_total",
			"Results appended to a queue's result log, by queue and result type (task.succeeded, task.failed, task.cancelled, task.needs_review).",
			"queue", "namespace", "type"),
		leaseExpiries: reg.CounterVec("task_lease_expiries_total",
			"Task leases that ran out without a worker's completion and were recovered, by queue.", "queue", "namespace"),
		sequencing: reg.Histogram("result_sequencing_seconds",
			"Time a write that appended events to a result log waited after its commit for the sequencing pass that numbered them and made their deliveries.",
			metrics.Seconds),
		tasks: reg.Snapshot("tasks",
			"Tasks in a live state (PENDING, RUNNING, NEEDS_REVIEW) by queue, at the last refresh; capped at 100000 per state.",
			"queue", "namespace", "state"),
		oldestAge: reg.Snapshot("task_oldest_pending_age_seconds",
			"Age of the queue's oldest PENDING task since its submission at the last refresh; 0 when none is pending.",
			"queue", "namespace"),
		head: reg.Snapshot("result_log_head_sequence",
			"Highest committed sequence of the queue's result log at the last refresh.", "queue", "namespace"),
		retained: reg.Snapshot("result_log_retained_events",
			"Events of the queue's result log not yet purged by retention at the last refresh.", "queue", "namespace"),
		namespaces: namespaces,
	}
}

// submittedTask counts a committed submission.
func (m *taskMetrics) submittedTask(t *Task) {
	if m != nil {
		m.submitted.WithLabelValues(t.QueueID, t.NamespaceID).Inc()
	}
}

// appended counts the results among committed events (task.requeued is
// not a result).
func (m *taskMetrics) appended(events ...*Event) {
	if m == nil {
		return
	}
	for _, ev := range events {
		if ev != nil && ev.Type != EventRequeued {
			m.results.WithLabelValues(ev.queueID, ev.namespaceID, ev.Type).Inc()
		}
	}
}

// sequenced records how long a committed write waited for its events'
// sequences.
func (m *taskMetrics) sequenced(d time.Duration) {
	if m != nil {
		m.sequencing.Observe(d.Seconds())
	}
}

// leaseExpired counts the committed recoveries of expired leases, one per
// event they appended.
func (m *taskMetrics) leaseExpired(events []Event) {
	if m == nil {
		return
	}
	for _, ev := range events {
		m.leaseExpiries.WithLabelValues(ev.queueID, ev.namespaceID).Inc()
	}
}

// RefreshMetrics recomputes the database-backed gauges (metrics.Refresher):
// one statement for the queues, one per queue for its live task counts
// and oldest PENDING task (ranges of ix_tasks_list_state, each count
// capped), and one per 500 queues for their log heads (primary key of
// queue_streams).
func (m *taskMetrics) RefreshMetrics(ctx context.Context, q *metrics.Querier) error {
	queues, err := m.namespaces.QueueNamespaces(ctx, q, metricsMaxQueues)
	if err != nil {
		return fmt.Errorf("tasks: metrics: %w", err)
	}
	ids := make([]string, 0, len(queues))
	for id := range queues {
		ids = append(ids, id)
	}
	now := db.Now()
	var tasks, ages []metrics.Sample
	for _, id := range ids {
		counts, oldest, err := queueTaskStats(ctx, q, id)
		if err != nil {
			return fmt.Errorf("tasks: metrics: %w", err)
		}
		for i, state := range liveStates {
			tasks = append(tasks, metrics.Sample{Labels: []string{id, queues[id], state}, Value: float64(counts[i])})
		}
		age := 0.0
		if oldest != nil {
			age = max(0, now.Sub(*oldest).Seconds())
		}
		ages = append(ages, metrics.Sample{Labels: []string{id, queues[id]}, Value: age})
	}
	var heads, retained []metrics.Sample
	for start := 0; start < len(ids); start += streamsChunk {
		chunk := ids[start:min(start+streamsChunk, len(ids))]
		streams, err := streamList(ctx, q, chunk)
		if err != nil {
			return fmt.Errorf("tasks: metrics: %w", err)
		}
		for _, id := range chunk {
			s, ok := streams[id]
			if !ok {
				s = Stream{Head: 0, RetentionMark: 1}
			}
			kept := uint64(0)
			if s.Head >= s.RetentionMark {
				kept = s.Head - s.RetentionMark + 1
			}
			heads = append(heads, metrics.Sample{Labels: []string{id, queues[id]}, Value: float64(s.Head)})
			retained = append(retained, metrics.Sample{Labels: []string{id, queues[id]}, Value: float64(kept)})
		}
	}
	m.tasks.Set(tasks)
	m.oldestAge.Set(ages)
	m.head.Set(heads)
	m.retained.Set(retained)
	return nil
}

// queueTaskStats returns, in one statement, a queue's task counts in each
// of liveStates (each capped at metricsCountCap) and the submission time
// of its oldest PENDING task (nil when none is pending).
func queueTaskStats(ctx context.Context, q Querier, queueID string) ([]int64, *time.Time, error) {
	count := `(SELECT COUNT(*) FROM (SELECT 1 FROM tasks WHERE queue_id = ? AND state = ? LIMIT ?) c)`
	var counts [3]int64
	var oldest *time.Time
	err := q.QueryRowContext(ctx, `SELECT `+count+`, `+count+`, `+count+`,
		(SELECT MIN(created_at) FROM tasks WHERE queue_id = ? AND state = 'PENDING')`,
		queueID, liveStates[0], metricsCountCap, queueID, liveStates[1], metricsCountCap,
		queueID, liveStates[2], metricsCountCap, queueID).Scan(&counts[0], &counts[1], &counts[2], &oldest)
	if err != nil {
		return nil, nil, fmt.Errorf("queue %s task counts: %w", queueID, err)
	}
	return counts[:], oldest, nil
}

// streamList returns the head and retention mark of the given queues'
// logs, keyed by queue; a queue that never logged anything is absent.
func streamList(ctx context.Context, q Querier, queueIDs []string) (map[string]Stream, error) {
	args := db.Args(queueIDs)
	rows, err := q.QueryContext(ctx, `SELECT queue_id, head_sequence, retention_mark FROM queue_streams
		WHERE queue_id IN (`+db.Placeholders(len(queueIDs))+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("read streams: %w", err)
	}
	defer rows.Close()
	out := make(map[string]Stream, len(queueIDs))
	for rows.Next() {
		var id string
		var s Stream
		if err := rows.Scan(&id, &s.Head, &s.RetentionMark); err != nil {
			return nil, fmt.Errorf("read streams: %w", err)
		}
		out[id] = s
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read streams: %w", err)
	}
	return out, nil
}

var _ metrics.Refresher = (*taskMetrics)(nil)
