package subscriptions

import (
	"context"
	"database/sql"
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
// connected to the others, all of them: the signal does not say which
// subscriptions. The materialiser's and the purger's wake-ups
// are not relayed: the node that raised them does that work for all.
func (m *Module) ClusterSignals() []cluster.Signal {
	return []cluster.Signal{{Name: SignalClaimable, Broadcast: &m.claimable.Relayed, Woken: &m.claimable.All}}
}

// ConnectionKind names event sessions in `orbit cluster status`.
func (*Module) ConnectionKind() string { return "event" }

// ConnectionsOpen counts the open event sessions of each of nodeIDs,
// through the (node_id, closed_at) index.
func (*Module) ConnectionsOpen(ctx context.Context, q db.Querier, nodeIDs []string) (map[string]int, error) {
	return cluster.SessionsOpenByNode(ctx, q, "event_sessions", nodeIDs)
}

// ConnectionsClose closes the open event sessions of a node, in tx. Their
// leases stay until they expire or are ACKed with their proofs (E-5).
func (*Module) ConnectionsClose(ctx context.Context, tx *sql.Tx, nodeID string, at time.Time) (int64, error) {
	return cluster.SessionsCloseOfNode(ctx, tx, "event_sessions", nodeID, at)
}

var (
	_ cluster.Signaler    = (*Module)(nil)
	_ cluster.Connections = (*Module)(nil)
)
