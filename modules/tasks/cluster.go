package tasks

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/modules/cluster"
)

// What the tasks module offers to the cluster module: its worker sessions
// per node, and the signals that other nodes' worker connections wait on.

// Signal names of the tasks module in node_signals.
const (
	SignalSubmitted       = "tasks.submitted"
	SignalCancelRequested = "tasks.cancel_requested"
)

// ClusterSignals returns the signals that worker connections on other
// nodes wait on: submitted and cancel requested. Appended is not among
// them: its one waiter is the materialiser, which on the committing node
// already materialises for every subscription and then raises the
// subscriptions module's claimable signal, which is relayed.
func (m *Module) ClusterSignals() []cluster.Signal {
	return []cluster.Signal{
		{Name: SignalSubmitted, Broadcast: &m.store.submitted},
		{Name: SignalCancelRequested, Broadcast: &m.store.cancelRequested},
	}
}

// ConnectionKind names worker sessions in `orbit cluster status`.
func (*Module) ConnectionKind() string { return "worker" }

// ConnectionsOpen counts the open worker sessions of each of nodeIDs.
func (*Module) ConnectionsOpen(ctx context.Context, q db.Querier, nodeIDs []string) (map[string]int, error) {
	return countOpenByNode(ctx, q, "worker_sessions", nodeIDs)
}

// ConnectionsClose closes the open worker sessions of a node, in tx. Their
// leases stay until they expire or are completed, as after any close.
func (*Module) ConnectionsClose(ctx context.Context, tx *sql.Tx, nodeID string, at time.Time) (int64, error) {
	res, err := tx.ExecContext(ctx, `UPDATE worker_sessions SET closed_at = ? WHERE node_id = ? AND closed_at IS NULL`, at, nodeID)
	if err != nil {
		return 0, fmt.Errorf("tasks: close sessions of node: %w", err)
	}
	return res.RowsAffected()
}

// countOpenByNode counts the rows of a session table with closed_at NULL
// per node, through its (node_id, closed_at) index.
func countOpenByNode(ctx context.Context, q db.Querier, table string, nodeIDs []string) (map[string]int, error) {
	args := make([]any, len(nodeIDs))
	for i, id := range nodeIDs {
		args[i] = id
	}
	rows, err := q.QueryContext(ctx, `SELECT node_id, COUNT(*) FROM `+table+`
		WHERE node_id IN (`+db.Placeholders(len(nodeIDs))+`) AND closed_at IS NULL GROUP BY node_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("tasks: count open sessions: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[id] = n
	}
	return out, rows.Err()
}

var (
	_ cluster.Signaler    = (*Module)(nil)
	_ cluster.Connections = (*Module)(nil)
)
