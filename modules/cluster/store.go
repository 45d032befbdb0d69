package cluster

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/orbitrun/orbit/internal/db"
)

// Times in nodes are the database's clock (UTC_TIMESTAMP(6)), so that
// nodes whose clocks disagree still judge each other's heartbeats alike.

// NodeRegisterParams describe a node's registration.
type NodeRegisterParams struct {
	ID, Name          string
	HeartbeatInterval time.Duration
	// Signals are the names of the signals the node publishes.
	Signals []string
}

// NodeRegister writes the node's row, alive with a fresh heartbeat, and a
// zero counter for each of its signals that has none. It is idempotent: a
// node registers again under its id after it was marked dead, which keeps
// its counters.
func NodeRegister(ctx context.Context, pool *sql.DB, p *NodeRegisterParams) error {
	err := db.Tx(ctx, pool, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO nodes (id, name, pid, heartbeat_ms, started_at, heartbeat_at)
			VALUES (?, ?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))
			ON DUPLICATE KEY UPDATE heartbeat_at = UTC_TIMESTAMP(6), heartbeat_ms = VALUES(heartbeat_ms), dead_at = NULL, stopped_at = NULL`,
			p.ID, p.Name, os.Getpid(), p.HeartbeatInterval.Milliseconds()); err != nil {
			return err
		}
		if len(p.Signals) == 0 {
			return nil
		}
		args := make([]any, 0, 2*len(p.Signals))
		values := ""
		for i, name := range p.Signals {
			if i > 0 {
				values += ", "
			}
			values += "(?, ?)"
			args = append(args, p.ID, name)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO node_signals (node_id, name) VALUES `+values+`
			ON DUPLICATE KEY UPDATE counter = counter`, args...)
		return err
	})
	if err != nil {
		return fmt.Errorf("cluster: register node: %w", err)
	}
	return nil
}

// NodeHeartbeat beats the node's heartbeat. It returns false when the node
// is not alive in the table: marked dead by another node, stopped, or
// missing.
func NodeHeartbeat(ctx context.Context, pool *sql.DB, id string) (bool, error) {
	res, err := pool.ExecContext(ctx, `UPDATE nodes SET heartbeat_at = UTC_TIMESTAMP(6)
		WHERE id = ? AND dead_at IS NULL AND stopped_at IS NULL`, id)
	if err != nil {
		return false, fmt.Errorf("cluster: heartbeat: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("cluster: heartbeat: %w", err)
	}
	return n == 1, nil
}

// reapCandidate is a node the reaper looks at.
type reapCandidate struct {
	id, name string
	// dead is true for a node already marked dead, whose sessions are
	// closed once more (see nodeReap).
	dead bool
}

// nodeCandidates returns, apart from the node self, the live nodes whose
// heartbeat is older than deadAfter of their intervals, and the nodes
// marked dead within the last recent.
func nodeCandidates(ctx context.Context, pool *sql.DB, self string, recent time.Duration) ([]reapCandidate, error) {
	rows, err := pool.QueryContext(ctx, `
		SELECT id, name, dead_at IS NOT NULL FROM nodes
		WHERE id <> ? AND stopped_at IS NULL AND (
			(dead_at IS NULL AND heartbeat_at < UTC_TIMESTAMP(6) - INTERVAL heartbeat_ms * ? MICROSECOND)
			OR dead_at > UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND)`,
		self, deadAfter*1000, recent.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("cluster: reap: %w", err)
	}
	defer rows.Close()
	var out []reapCandidate
	for rows.Next() {
		var c reapCandidate
		if err := rows.Scan(&c.id, &c.name, &c.dead); err != nil {
			return nil, fmt.Errorf("cluster: reap: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// nodeReap marks the node id dead when it still is alive with a late
// heartbeat, and closes its open sessions in the same transaction; marked
// is false when another node did it first, or the node beat meanwhile.
// With again it marks nothing and closes the sessions of a node already
// dead once more: a session whose INSERT was in flight while the node was
// marked dead commits after that transaction. Its node row is locked, so
// that a node registering again waits, and keeps the sessions it opens
// after. Several nodes may reap at once: the conditional UPDATE on the
// locked row lets one of them mark the node.
func nodeReap(ctx context.Context, pool *sql.DB, id string, again bool, conns []Connections) (marked bool, closed map[string]int64, err error) {
	err = db.Tx(ctx, pool, func(tx *sql.Tx) error {
		marked, closed = false, map[string]int64{}
		if again {
			var dead bool
			err := tx.QueryRowContext(ctx, `SELECT dead_at IS NOT NULL AND stopped_at IS NULL FROM nodes WHERE id = ? FOR UPDATE`, id).Scan(&dead)
			if errors.Is(err, sql.ErrNoRows) || (err == nil && !dead) {
				return nil
			}
			if err != nil {
				return err
			}
		} else {
			res, err := tx.ExecContext(ctx, `UPDATE nodes SET dead_at = UTC_TIMESTAMP(6)
				WHERE id = ? AND dead_at IS NULL AND stopped_at IS NULL
				AND heartbeat_at < UTC_TIMESTAMP(6) - INTERVAL heartbeat_ms * ? MICROSECOND`, id, deadAfter*1000)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil || n == 0 {
				return err
			}
			marked = true
		}
		return closeSessions(ctx, tx, id, conns, closed)
	})
	if err != nil {
		return false, nil, fmt.Errorf("cluster: reap node %s: %w", id, err)
	}
	return marked, closed, nil
}

// closeSessions closes every open session of node id, in tx, and adds the
// counts to closed by kind.
func closeSessions(ctx context.Context, tx *sql.Tx, id string, conns []Connections, closed map[string]int64) error {
	at := db.Now()
	for _, c := range conns {
		n, err := c.ConnectionsClose(ctx, tx, id, at)
		if err != nil {
			return err
		}
		closed[c.ConnectionKind()] += n
	}
	return nil
}

// nodeStop marks the node stopped and closes the sessions it still has
// open, in one transaction.
func nodeStop(ctx context.Context, pool *sql.DB, id string, conns []Connections) error {
	return db.Tx(ctx, pool, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE nodes SET stopped_at = UTC_TIMESTAMP(6) WHERE id = ? AND stopped_at IS NULL`, id); err != nil {
			return err
		}
		return closeSessions(ctx, tx, id, conns, map[string]int64{})
	})
}

// nodeForget deletes the nodes stopped or dead for longer than after, and
// the signal counters of nodes that are gone.
func nodeForget(ctx context.Context, pool *sql.DB, after time.Duration) error {
	if _, err := pool.ExecContext(ctx, `DELETE FROM nodes
		WHERE COALESCE(stopped_at, dead_at) < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND`, after.Microseconds()); err != nil {
		return fmt.Errorf("cluster: forget nodes: %w", err)
	}
	if _, err := pool.ExecContext(ctx, `DELETE s FROM node_signals s LEFT JOIN nodes n ON n.id = s.node_id WHERE n.id IS NULL`); err != nil {
		return fmt.Errorf("cluster: forget nodes: %w", err)
	}
	return nil
}

// SignalBump adds one to the node's counters of the named signals.
func SignalBump(ctx context.Context, pool *sql.DB, nodeID string, names []string) error {
	args := make([]any, 0, 1+len(names))
	args = append(args, nodeID)
	for _, n := range names {
		args = append(args, n)
	}
	_, err := pool.ExecContext(ctx, `UPDATE node_signals SET counter = counter + 1
		WHERE node_id = ? AND name IN (`+db.Placeholders(len(names))+`)`, args...)
	if err != nil {
		return fmt.Errorf("cluster: publish signals: %w", err)
	}
	return nil
}

// peerSignal is one signal counter of another live node; name is "" for a
// node without signals.
type peerSignal struct {
	node, name string
	counter    uint64
}

// signalRead returns the signal counters of every live node but self, in
// one index-free read of two small tables.
func signalRead(ctx context.Context, pool *sql.DB, self string) ([]peerSignal, error) {
	rows, err := pool.QueryContext(ctx, `
		SELECT n.id, COALESCE(s.name, ''), COALESCE(s.counter, 0) FROM nodes n
		LEFT JOIN node_signals s ON s.node_id = n.id
		WHERE n.dead_at IS NULL AND n.stopped_at IS NULL AND n.id <> ?`, self)
	if err != nil {
		return nil, fmt.Errorf("cluster: read signals: %w", err)
	}
	defer rows.Close()
	var out []peerSignal
	for rows.Next() {
		var p peerSignal
		if err := rows.Scan(&p.node, &p.name, &p.counter); err != nil {
			return nil, fmt.Errorf("cluster: read signals: %w", err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// NodeView is one node as `orbit cluster status` shows it.
type NodeView struct {
	ID, Name          string
	PID               int
	HeartbeatInterval time.Duration
	StartedAt         time.Time
	HeartbeatAt       time.Time
	// HeartbeatAge is how long ago the last heartbeat was, by the
	// database clock.
	HeartbeatAge time.Duration
	StoppedAt    *time.Time
	DeadAt       *time.Time
	// Connections counts the open sessions by kind ("worker", "event").
	Connections map[string]int
}

// State is "dead" (marked dead), "stopped" (stopped in order), "late" (no
// heartbeat for three intervals, and no live node has marked it dead yet)
// or "alive".
func (v *NodeView) State() string {
	switch {
	case v.DeadAt != nil:
		return "dead"
	case v.StoppedAt != nil:
		return "stopped"
	case v.HeartbeatAge > deadAfter*v.HeartbeatInterval:
		return "late"
	}
	return "alive"
}

// NodeList returns every node newest first, with the open connections of
// each as the modules of conns count them.
func NodeList(ctx context.Context, pool *sql.DB, conns []Connections) ([]NodeView, error) {
	rows, err := pool.QueryContext(ctx, `
		SELECT id, name, pid, heartbeat_ms, started_at, heartbeat_at, stopped_at, dead_at,
			TIMESTAMPDIFF(MICROSECOND, heartbeat_at, UTC_TIMESTAMP(6))
		FROM nodes ORDER BY started_at DESC, id`)
	if err != nil {
		return nil, fmt.Errorf("cluster: list nodes: %w", err)
	}
	defer rows.Close()
	var out []NodeView
	var ids []string
	for rows.Next() {
		var v NodeView
		var ms, age int64
		var stopped, dead sql.NullTime
		if err := rows.Scan(&v.ID, &v.Name, &v.PID, &ms, &v.StartedAt, &v.HeartbeatAt, &stopped, &dead, &age); err != nil {
			return nil, fmt.Errorf("cluster: list nodes: %w", err)
		}
		v.HeartbeatInterval, v.HeartbeatAge = time.Duration(ms)*time.Millisecond, time.Duration(age)*time.Microsecond
		if stopped.Valid {
			v.StoppedAt = &stopped.Time
		}
		if dead.Valid {
			v.DeadAt = &dead.Time
		}
		v.Connections = map[string]int{}
		out = append(out, v)
		ids = append(ids, v.ID)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cluster: list nodes: %w", err)
	}
	if len(ids) == 0 {
		return out, nil
	}
	for _, c := range conns {
		counts, err := c.ConnectionsOpen(ctx, pool, ids)
		if err != nil {
			return nil, fmt.Errorf("cluster: list nodes: %w", err)
		}
		for i := range out {
			out[i].Connections[c.ConnectionKind()] = counts[out[i].ID]
		}
	}
	return out, nil
}
