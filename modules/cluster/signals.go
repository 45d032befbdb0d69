package cluster

import (
	"context"
	"time"

	"github.com/orbitrun/orbit/internal/wake"
)

// forward sends on kick whenever b was notified on this node since seen:
// its count (Gen) moved. A relayed wake-up (Wake) closes the channel but
// moves no count, so it sends nothing. The channel is taken before the
// count is read, so no Notify is missed.
func forward(ctx context.Context, b *wake.Broadcast, seen uint64, kick chan<- struct{}) {
	for {
		ch := b.C()
		if g := b.Gen(); g != seen {
			seen = g
			select {
			case kick <- struct{}{}:
			default:
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}

// publishLoop bumps this node's counters of the signals notified since
// their last publication, in one UPDATE, each time a forwarder kicks it,
// and then waits signal_interval: the other nodes read no more often, so
// the notifications of that time go out together in the next UPDATE. A
// node without live peers publishes nothing; last holds the counts
// published (or skipped) last.
func (m *Module) publishLoop(ctx context.Context, last []uint64, kick <-chan struct{}) {
	var failing failures
	pause := time.NewTimer(0)
	defer pause.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		}
		var names []string
		for i, s := range m.signals {
			if g := s.Broadcast.Gen(); g != last[i] {
				last[i] = g
				names = append(names, s.Name)
			}
		}
		if len(names) == 0 || m.peers.Load() == 0 || !m.registered.Load() {
			continue
		}
		if err := SignalBump(ctx, m.db, m.id, names); err != nil {
			// The peers find the change by their own polls.
			if ctx.Err() == nil {
				failing.fail(m.logger, "publish signals failed", err)
			}
		} else {
			failing.recover(m.logger, "publish signals recovered")
			m.published.Add(1)
		}
		pause.Reset(m.cfg.SignalInterval)
		select {
		case <-ctx.Done():
			return
		case <-pause.C:
		}
	}
}

// watchLoop reads the other live nodes' signal counters and wakes the
// local waiters of every signal whose counter moved on one of them (one
// seen for the first time counts as moved from 0). It reads every
// signal_interval while counters move, doubling the interval up to
// signal_idle_max while they do not or while no other node is alive: a
// node alone publishes nothing, so it must find a node that joins within
// signal_idle_max, or the first results of the newcomer's consumers would
// wait for their poll.
func (m *Module) watchLoop(ctx context.Context) {
	byName := map[string][]*wake.Broadcast{}
	for _, s := range m.signals {
		byName[s.Name] = append(byName[s.Name], s.woken())
	}
	var failing failures
	seen := map[string]map[string]uint64{}
	wait := m.cfg.SignalInterval
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		rows, err := signalRead(ctx, m.db, m.id)
		if err != nil {
			if ctx.Err() == nil {
				failing.fail(m.logger, "read signals failed", err)
			}
			timer.Reset(m.cfg.HeartbeatInterval)
			continue
		}
		failing.recover(m.logger, "read signals recovered")
		moved := map[string]bool{}
		now := map[string]map[string]uint64{}
		for _, r := range rows {
			if now[r.node] == nil {
				now[r.node] = map[string]uint64{}
			}
			if r.name == "" {
				continue
			}
			now[r.node][r.name] = r.counter
			if seen[r.node][r.name] != r.counter {
				moved[r.name] = true
			}
		}
		seen = now
		m.peers.Store(int64(len(now)))
		for name := range moved {
			for _, b := range byName[name] {
				b.Wake()
			}
		}
		switch {
		case len(moved) > 0:
			wait = m.cfg.SignalInterval
		default:
			wait = min(2*wait, m.cfg.SignalIdleMax)
		}
		timer.Reset(wait)
	}
}
