package main

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// otlpSink stands in for an OTLP/HTTP collector: it accepts trace exports
// and counts them, so that the traced drain pays for making, encoding and
// sending its spans, but not for a collector's work.
type otlpSink struct {
	srv      *http.Server
	ln       net.Listener
	done     chan struct{}
	requests atomic.Int64
	bytes    atomic.Int64
}

// startOTLPSink serves the sink on a loopback port until close.
func startOTLPSink() (*otlpSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &otlpSink{ln: ln, done: make(chan struct{})}
	s.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		s.requests.Add(1)
		s.bytes.Add(n)
		// An empty ExportTraceServiceResponse: everything accepted.
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return
		}
	}()
	return s, nil
}

// URL returns the sink's OTLP traces endpoint.
func (s *otlpSink) URL() string { return "http://" + s.ln.Addr().String() + "/v1/traces" }

// close stops the sink and waits for it.
func (s *otlpSink) close() {
	_ = s.srv.Close()
	<-s.done
}
