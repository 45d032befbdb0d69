package cluster

import (
	"context"
	"log/slog"
	"time"
)

// heartbeatLoop registers the node, then beats its heartbeat and reaps
// dead nodes every heartbeat_interval until ctx ends.
func (m *Module) heartbeatLoop(ctx context.Context) {
	b := beater{m: m}
	ticker := time.NewTicker(m.cfg.HeartbeatInterval)
	defer ticker.Stop()
	for {
		b.beat(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// beater is the state of the heartbeat loop.
type beater struct {
	m *Module
	// healthySince is when the heartbeats last started to succeed on
	// time; zero while they fail.
	healthySince time.Time
	// lastBeat is when the last heartbeat succeeded.
	lastBeat time.Time
	// lastForget is when stopped and dead nodes were last forgotten.
	lastForget time.Time
	failing    failures
}

// beat registers the node or beats its heartbeat, and, once this node's
// own heartbeats have succeeded on time for deadAfter intervals, reaps: a
// node back from a database outage gives the others as long to beat again
// as they would be given by a node that never lost the database, instead
// of marking them all dead at once. A heartbeat that succeeds more than two
// intervals after the previous one counts as back from an outage too: the
// database held it (the survivors of a Galera cluster hold every commit
// until they have evicted a dead node, and the heartbeat then commits the
// time its statement began), or this process was paused, and the others'
// heartbeats were held as long.
func (b *beater) beat(ctx context.Context) {
	m := b.m
	if !m.registered.Load() {
		if !b.register(ctx) {
			return
		}
		m.logger.Info("node registered", "name", m.name)
	} else {
		alive, err := NodeHeartbeat(ctx, m.db, m.id)
		if err != nil {
			b.fail(ctx, "heartbeat failed", err)
			return
		}
		if !alive {
			m.logger.Error("this node was marked dead by another node: its heartbeat was late by more than 3 intervals; "+
				"its worker and event sessions were closed, so their connections are closed now with 1012 and their clients reconnect; registering again",
				"name", m.name, "heartbeat_interval", m.cfg.HeartbeatInterval)
			if !b.register(ctx) {
				m.registered.Store(false)
				return
			}
			// Every dispatcher looks now, finds its session closed and
			// closes its connection.
			for _, s := range m.signals {
				s.woken().Wake()
			}
		}
	}
	b.failing.recover(m.logger, "heartbeat recovered")
	now := time.Now()
	if b.healthySince.IsZero() || now.Sub(b.lastBeat) > 2*m.cfg.HeartbeatInterval {
		b.healthySince = now
	}
	b.lastBeat = now
	if now.Sub(b.healthySince) >= deadAfter*m.cfg.HeartbeatInterval {
		b.reap(ctx)
	}
	if now.Sub(b.lastForget) >= time.Minute {
		b.lastForget = now
		if err := nodeForget(ctx, m.db, forgetAfter); err != nil && ctx.Err() == nil {
			m.logger.Warn("forget old nodes", "err", err)
		}
	}
}

// register writes the node's row; false when it failed.
func (b *beater) register(ctx context.Context) bool {
	m := b.m
	names := make([]string, len(m.signals))
	for i, s := range m.signals {
		names[i] = s.Name
	}
	err := NodeRegister(ctx, m.db, &NodeRegisterParams{ID: m.id, Name: m.name, HeartbeatInterval: m.cfg.HeartbeatInterval, Signals: names})
	if err != nil {
		b.fail(ctx, "register node failed", err)
		return false
	}
	m.registered.Store(true)
	return true
}

// fail reports a failed beat, once per run of failures.
func (b *beater) fail(ctx context.Context, msg string, err error) {
	b.healthySince = time.Time{}
	if ctx.Err() == nil {
		b.failing.fail(b.m.logger, msg, err)
	}
}

// reap marks the nodes whose heartbeat is late dead and closes their
// sessions, and closes once more the sessions of nodes marked dead within
// the last deadAfter heartbeats of this node.
func (b *beater) reap(ctx context.Context) {
	m := b.m
	candidates, err := nodeCandidates(ctx, m.db, m.id, deadAfter*m.cfg.HeartbeatInterval)
	if err != nil {
		if ctx.Err() == nil {
			m.logger.Warn("reap dead nodes", "err", err)
		}
		return
	}
	for _, c := range candidates {
		marked, closed, err := nodeReap(ctx, m.db, c.id, c.dead, m.conns)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				m.logger.Warn("reap dead node", "dead_node_id", c.id, "err", err)
			}
		case marked:
			m.logger.Warn("node marked dead: no heartbeat for 3 intervals; its sessions are closed", append([]any{"dead_node_id", c.id, "dead_node_name", c.name}, closedAttrs(closed)...)...)
		case total(closed) > 0:
			m.logger.Warn("closed sessions a dead node opened as it was marked dead", append([]any{"dead_node_id", c.id, "dead_node_name", c.name}, closedAttrs(closed)...)...)
		}
	}
}

func closedAttrs(closed map[string]int64) []any {
	var out []any
	for kind, n := range closed {
		out = append(out, "closed_"+kind+"_sessions", n)
	}
	return out
}

func total(closed map[string]int64) int64 {
	var n int64
	for _, k := range closed {
		n += k
	}
	return n
}

// failures logs the first failure of a run of failures and the recovery
// after it, rather than every failure of a loop that retries often.
type failures struct{ failing bool }

func (f *failures) fail(logger *slog.Logger, msg string, err error) {
	if !f.failing {
		f.failing = true
		logger.Warn(msg, "err", err)
	}
}

func (f *failures) recover(logger *slog.Logger, msg string) {
	if f.failing {
		f.failing = false
		logger.Info(msg)
	}
}
