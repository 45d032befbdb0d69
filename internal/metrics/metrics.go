// Package metrics is the node's Prometheus kit (O-1 … O-3): one Registry per
// server, which every module's counters, gauges and histograms join and
// which GET /metrics exposes, and the one background Collector that
// refreshes the gauges needing the database.
//
// Nothing here is global: each server builds its own Registry, so test
// servers running side by side never share a series. A nil *Registry is
// valid: the collectors it hands out work but are exposed nowhere, which is
// what commands that provision modules without serving get.
package metrics

import (
	"errors"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every Orbit metric name.
const Namespace = "orbit"

// Registry holds the collectors of one node and the refreshers its
// Collector runs. Its methods are safe for concurrent use.
type Registry struct {
	reg *prometheus.Registry

	mu         sync.Mutex
	refreshers []Refresher
}

// New returns a Registry that already holds the Go runtime and process
// collectors.
func New() *Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Registry{reg: reg}
}

// Gatherer returns what a scrape reads, for tests and promlint.
func (r *Registry) Gatherer() prometheus.Gatherer { return r.reg }

// Handler returns the GET /metrics handler: the text exposition format
// from the registry's collectors as they stand. It never touches the
// database (O-3); gauges that need it are the Collector's.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// register adds c, or returns the collector already registered under the
// same descriptors (two entries sharing one family, for example). A
// conflicting descriptor is a programmer error and panics.
func register[C prometheus.Collector](r *Registry, c C) C {
	if r == nil {
		return c
	}
	if err := r.reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic("metrics: " + err.Error())
	}
	return c
}

// CounterVec registers (or finds) the counter family name with labels.
// name is given without the "orbit_" prefix.
func (r *Registry) CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return register(r, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels))
}

// Counter registers (or finds) the counter name.
func (r *Registry) Counter(name, help string) prometheus.Counter {
	return register(r, prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}))
}

// Gauge registers (or finds) the gauge name.
func (r *Registry) Gauge(name, help string) prometheus.Gauge {
	return register(r, prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help}))
}

// HistogramVec registers (or finds) the histogram family name with
// buckets and labels.
func (r *Registry) HistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return register(r, prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets}, labels))
}

// Histogram registers (or finds) the histogram name with buckets.
func (r *Registry) Histogram(name, help string, buckets []float64) prometheus.Histogram {
	return register(r, prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets}))
}

// GaugeFunc registers a gauge whose value fn returns at each scrape, with
// constant labels. fn must be cheap and must not touch the database.
func (r *Registry) GaugeFunc(name, help string, labels prometheus.Labels, fn func() float64) {
	register(r, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help, ConstLabels: labels}, fn))
}

// CounterFunc registers a counter whose value fn returns at each scrape.
// fn must be cheap, must never decrease and must not touch the database.
func (r *Registry) CounterFunc(name, help string, labels prometheus.Labels, fn func() float64) {
	register(r, prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help, ConstLabels: labels}, fn))
}

// Unregister removes c, for a collector whose source goes away before the
// registry does (a database pool closed by its owner).
func (r *Registry) Unregister(c prometheus.Collector) {
	if r != nil {
		r.reg.Unregister(c)
	}
}

// Seconds are histogram buckets for latencies from 1 ms to 60 s.
var Seconds = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
