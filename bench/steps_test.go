package main

import (
	"math"
	"testing"
)

// TestHistogramQuantile: quantiles of the difference of two gathers,
// interpolated within buckets as Prometheus' histogram_quantile does.
func TestHistogramQuantile(t *testing.T) {
	inf := math.Inf(1)
	before := histogram{bounds: []float64{0.001, 0.005, 0.01, inf}, counts: []uint64{10, 10, 10, 10}}
	// After: 100 more, 50 at most 1 ms, 40 in (1, 5] ms, 9 in (5, 10] ms, 1 above.
	after := histogram{bounds: before.bounds, counts: []uint64{60, 100, 109, 110}}
	h := after.since(before)
	if h.total() != 100 {
		t.Fatalf("total %d, want 100", h.total())
	}
	for _, c := range []struct{ q, want float64 }{
		{0.25, 0.0005}, // half way through the first bucket, from 0
		{0.5, 0.001},   // its upper bound
		{0.7, 0.003},   // half way through (1, 5] ms
		{0.99, 0.01},   // the last finite bound
		{0.995, 0.01},  // in +Inf: the highest finite bound
	} {
		if got := h.quantile(c.q); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := (histogram{}).quantile(0.5); !math.IsNaN(got) {
		t.Errorf("quantile of nothing = %v, want NaN", got)
	}
}
