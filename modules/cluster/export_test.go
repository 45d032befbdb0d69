package cluster

import (
	"context"
	"testing"
	"time"
)

// Kill stops the node's loops without Stop, as when its process is
// killed: its row and its sessions stay as they were, and it beats no
// more.
func Kill(t testing.TB, m *Module) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.loops.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// Published returns how many times the node published its signals.
func Published(m *Module) int64 { return m.published.Load() }
