package tasks

import (
	"context"
	"database/sql"
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
		{Name: SignalSubmitted, Broadcast: &m.store.submitted.Relayed, Woken: &m.store.submitted.All},
		{Name: SignalCancelRequested, Broadcast: &m.store.cancelRequested},
	}
}

// ConnectionKind names worker sessions in `orbit cluster status`.
func (*Module) ConnectionKind() string { return "worker" }

// ConnectionsOpen counts the open worker sessions of each of nodeIDs.
func (*Module) ConnectionsOpen(ctx context.Context, q db.Querier, nodeIDs []string) (map[string]int, error) {
	return cluster.SessionsOpenByNode(ctx, q, "worker_sessions", nodeIDs)
}

// ConnectionsClose closes the open worker sessions of a node, in tx. Their
// leases stay until they expire or are completed, as after any close.
func (*Module) ConnectionsClose(ctx context.Context, tx *sql.Tx, nodeID string, at time.Time) (int64, error) {
	return cluster.SessionsCloseOfNode(ctx, tx, "worker_sessions", nodeID, at)
}

var (
	_ cluster.Signaler    = (*Module)(nil)
	_ cluster.Connections = (*Module)(nil)
)
