package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Sample is one series of a Snapshot: its label values, in the order of the
// snapshot's labels, and its value.
type Sample struct {
	Labels []string
	Value  float64
}

// Snapshot is a gauge family whose series are replaced all at once, by the
// Collector's refresh: a scrape reads the last complete set, never a half
// refreshed one, and a series that the refresh no longer reports (a deleted
// subscription) disappears. A scrape only reads memory.
type Snapshot struct {
	desc    *prometheus.Desc
	labels  int
	samples atomic.Pointer[[]Sample]
}

// Snapshot registers (or finds) the snapshot gauge family name with labels.
func (r *Registry) Snapshot(name, help string, labels ...string) *Snapshot {
	s := &Snapshot{desc: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil), labels: len(labels)}
	return register(r, s)
}

// Set replaces every series of the family. A sample with the wrong number
// of label values is a programmer error and panics.
func (s *Snapshot) Set(samples []Sample) {
	for _, x := range samples {
		if len(x.Labels) != s.labels {
			panic("metrics: snapshot sample with wrong label count")
		}
	}
	s.samples.Store(&samples)
}

// Samples returns the series as last set.
func (s *Snapshot) Samples() []Sample {
	if p := s.samples.Load(); p != nil {
		return *p
	}
	return nil
}

// Describe implements prometheus.Collector.
func (s *Snapshot) Describe(ch chan<- *prometheus.Desc) { ch <- s.desc }

// Collect implements prometheus.Collector.
func (s *Snapshot) Collect(ch chan<- prometheus.Metric) {
	for _, x := range s.Samples() {
		ch <- prometheus.MustNewConstMetric(s.desc, prometheus.GaugeValue, x.Value, x.Labels...)
	}
}

var _ prometheus.Collector = (*Snapshot)(nil)
