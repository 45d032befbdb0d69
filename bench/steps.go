package main

import (
	"fmt"
	"math"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// resultSteps are the server's histograms of a result's way to its
// consumers (docs/operations.md): the sequencing pass, the wait for a
// claim slot, the claim, and the whole of it, commit to first
// event.deliver.
var resultSteps = []struct{ family, label string }{
	{"orbit_result_sequencing_seconds", "sequencing pass"},
	{"orbit_claim_wait_seconds", "claim slot wait"},
	{"orbit_claim_seconds", "claim"},
	{"orbit_result_delivery_seconds", "commit→first deliver"},
}

// histogram is one unlabelled histogram of a gather: cumulative counts
// per upper bound, +Inf last.
type histogram struct {
	bounds []float64
	counts []uint64
}

// stepHistograms gathers the server's resultSteps histograms from its
// registry, as a scrape would read them.
func (e *env) stepHistograms() (map[string]histogram, error) {
	families, err := e.srv.Metrics().Gatherer().Gather()
	if err != nil {
		return nil, fmt.Errorf("gather metrics: %w", err)
	}
	out := map[string]histogram{}
	for _, f := range families {
		if f.GetType() != dto.MetricType_HISTOGRAM || len(f.GetMetric()) != 1 {
			continue
		}
		h := f.GetMetric()[0].GetHistogram()
		var x histogram
		for _, b := range h.GetBucket() {
			x.bounds = append(x.bounds, b.GetUpperBound())
			x.counts = append(x.counts, b.GetCumulativeCount())
		}
		x.bounds = append(x.bounds, math.Inf(1))
		x.counts = append(x.counts, h.GetSampleCount())
		out[f.GetName()] = x
	}
	return out, nil
}

// since returns what h counted after before, a gather of the same
// histogram.
func (h histogram) since(before histogram) histogram {
	out := histogram{bounds: h.bounds, counts: make([]uint64, len(h.counts))}
	for i := range h.counts {
		out.counts[i] = h.counts[i]
		if i < len(before.counts) {
			out.counts[i] -= before.counts[i]
		}
	}
	return out
}

// total is the number of observations.
func (h histogram) total() uint64 {
	if len(h.counts) == 0 {
		return 0
	}
	return h.counts[len(h.counts)-1]
}

// quantile estimates the q-quantile as Prometheus' histogram_quantile
// does: linear within the bucket that holds it, the highest finite bound
// when it falls in the +Inf bucket.
func (h histogram) quantile(q float64) float64 {
	n := h.total()
	if n == 0 {
		return math.NaN()
	}
	rank := q * float64(n)
	lower, below := 0.0, uint64(0)
	for i, c := range h.counts {
		if float64(c) >= rank {
			if math.IsInf(h.bounds[i], 1) {
				return lower
			}
			inBucket := float64(c - below)
			if inBucket == 0 {
				return h.bounds[i]
			}
			return lower + (h.bounds[i]-lower)*(rank-float64(below))/inBucket
		}
		lower, below = h.bounds[i], c
	}
	return lower
}

// stepsLine describes each step's p50 and p99 between two gathers.
func stepsLine(before, after map[string]histogram) string {
	var parts []string
	for _, s := range resultSteps {
		h := after[s.family].since(before[s.family])
		if h.total() == 0 {
			parts = append(parts, s.label+" –")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s p50 %.1f · p99 %.1f ms (%d)", s.label, 1000*h.quantile(0.5), 1000*h.quantile(0.99), h.total()))
	}
	return strings.Join(parts, "; ")
}
