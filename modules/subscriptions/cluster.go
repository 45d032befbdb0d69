package subscriptions

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/modules/cluster"
)

// What the subscriptions module offers to the cluster module: its event
// sessions per node, and the signal that other nodes' event connections
// wait on.

// SignalClaimable is the name of the claimable signal in node_signals.
const SignalClaimable = "subscriptions.claimable"

// ClusterSignals returns the claimable signal, which event connections on
// every node wait on: a result committed on one node is materialised there
// (for every subscription) and its claimable signal wakes the consumers
// connected to the others. The materialiser's and the purger's wake-ups
// are not relayed: the node that raised them does that work for all.
func (m *Module) ClusterSignals() []cluster.Signal {
	return []cluster.Signal{{Name: SignalClaimable, Broadcast: &m.claimable}}
}

// ConnectionKind names event sessions in `orbit cluster status`.
func (*Module) ConnectionKind() string { return "event" }

// ConnectionsOpen counts the open event sessions of each of nodeIDs,
// through the (node_id, closed_at) index.
func (*Module) ConnectionsOpen(ctx context.Context, q db.Querier, nodeIDs []string) (map[string]int, error) {
	args := make([]any, len(nodeIDs))
	for i, id := range nodeIDs {
		args[i] = id
	}
	rows, err := q.QueryContext(ctx, `SELECT node_id, COUNT(*) FROM event_sessions
		WHERE node_id IN (`+db.Placeholders(len(nodeIDs))+`) AND closed_at IS NULL GROUP BY node_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("subscriptions: count open sessions: %w", err)
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

// ConnectionsClose closes the open event sessions of a node, in tx. Their
// leases stay until they expire or are ACKed with their proofs (E-5).
func (*Module) ConnectionsClose(ctx context.Context, tx *sql.Tx, nodeID string, at time.Time) (int64, error) {
	res, err := tx.ExecContext(ctx, `UPDATE event_sessions SET closed_at = ? WHERE node_id = ? AND closed_at IS NULL`, at, nodeID)
	if err != nil {
		return 0, fmt.Errorf("subscriptions: close sessions of node: %w", err)
	}
	return res.RowsAffected()
}

var (
	_ cluster.Signaler    = (*Module)(nil)
	_ cluster.Connections = (*Module)(nil)
)
