package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/orbitrun/orbit/internal/metrics"
)

// TestO3_SnapshotReplacesEverySeries: a refresh replaces the family whole,
// so a series it no longer reports disappears.
func TestO3_SnapshotReplacesEverySeries(t *testing.T) {
	t.Parallel()
	reg := metrics.New()
	s := reg.Snapshot("things", "Things by kind.", "kind")
	s.Set([]metrics.Sample{{Labels: []string{"a"}, Value: 1}, {Labels: []string{"b"}, Value: 2}})
	if n := testutil.CollectAndCount(s); n != 2 {
		t.Fatalf("%d series, want 2", n)
	}
	s.Set([]metrics.Sample{{Labels: []string{"b"}, Value: 3}})
	want := "# HELP orbit_things Things by kind.\n# TYPE orbit_things gauge\norbit_things{kind=\"b\"} 3\n"
	if err := testutil.GatherAndCompare(reg.Gatherer(), strings.NewReader(want), "orbit_things"); err != nil {
		t.Error(err)
	}
}

// TestO2_SameFamilyTwice: two users of one family (two WebSocket entries)
// get the same collector; a nil registry hands out working collectors that
// are exposed nowhere.
func TestO2_SameFamilyTwice(t *testing.T) {
	t.Parallel()
	reg := metrics.New()
	a := reg.CounterVec("refused_total", "Refusals.", "entry")
	b := reg.CounterVec("refused_total", "Refusals.", "entry")
	a.WithLabelValues("events").Inc()
	b.WithLabelValues("events").Inc()
	if v := testutil.ToFloat64(a.WithLabelValues("events")); v != 2 {
		t.Errorf("shared counter = %v, want 2", v)
	}
	var none *metrics.Registry
	c := none.Counter("nowhere_total", "Not exposed.")
	c.Inc()
	if v := testutil.ToFloat64(c); v != 1 {
		t.Errorf("counter of a nil registry = %v, want 1", v)
	}
	none.Refresh(nil)
}
