package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gorilla/mux"
)

// syncBuffer is a log destination that a server goroutine may write to
// while a test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// records returns the JSON log records written so far.
func (b *syncBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(b.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, rec)
	}
	return out
}

// testRouter returns a router with the handlers the middleware tests use.
func testRouter() *mux.Router {
	router := mux.NewRouter()
	router.NotFoundHandler = NotFound()
	router.MethodNotAllowedHandler = MethodNotAllowed()
	router.HandleFunc("/v1/things/{id}", func(w http.ResponseWriter, r *http.Request) {
		WriteData(w, r, http.StatusOK, map[string]string{"id": mux.Vars(r)["id"], "request_id": RequestID(r.Context())})
	}).Methods(http.MethodGet)
	router.HandleFunc("/v1/things/{id}", func(w http.ResponseWriter, r *http.Request) {
		WriteData(w, r, http.StatusOK, nil)
	}).Methods(http.MethodDelete)
	router.HandleFunc("/v1/things", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Name *string `json:"name"`
		}
		if err := DecodeJSON(r, &req); err != nil {
			WriteError(w, r, err)
			return
		}
		if err := Required(Field{Path: "name", Present: req.Name != nil}); err != nil {
			WriteError(w, r, err)
			return
		}
		WriteData(w, r, http.StatusCreated, map[string]any{"created": true})
	}).Methods(http.MethodPost)
	router.HandleFunc("/v1/list", func(w http.ResponseWriter, r *http.Request) {
		q, err := Query(r, "limit", "cursor")
		if err != nil {
			WriteError(w, r, err)
			return
		}
		WriteData(w, r, http.StatusOK, map[string]int{"n": len(q)})
	}).Methods(http.MethodGet)
	router.HandleFunc("/fail", func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, r, errors.New("store: insert: connection refused"))
	})
	router.HandleFunc("/busy", func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, r, Errorf(CodeCapacityExceeded, "too many connections"))
	})
	router.HandleFunc("/panic", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Partial", "1")
		panic("boom")
	})
	router.HandleFunc("/silent", func(w http.ResponseWriter, r *http.Request) {})
	router.HandleFunc("/raw", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{}`))
	})
	return router
}

// serve runs one request through Middleware around handler and returns the
// recorded response.
func serve(t *testing.T, opts MiddlewareOptions, handler http.Handler, r *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	Middleware(opts, handler).ServeHTTP(w, r)
	return w
}

// testLogger returns a JSON logger writing into a new buffer.
func testLogger() (*slog.Logger, *syncBuffer) {
	buf := &syncBuffer{}
	return slog.New(slog.NewJSONHandler(buf, nil)), buf
}

// envelope is a decoded response body.
type envelope struct {
	RequestID string          `json:"request_id"`
	Data      json.RawMessage `json:"data"`
	Error     *struct {
		Code    Code   `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// checkEnvelope checks the C-6 headers and body of w and returns the body.
func checkEnvelope(t *testing.T, w *httptest.ResponseRecorder) envelope {
	t.Helper()
	h := w.Result().Header
	id := h.Get("X-Request-ID")
	if !ValidID(id) {
		t.Errorf("X-Request-ID = %q, want 32 lowercase hex characters", id)
	}
	if got := h.Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control = %q, want no-store", got)
	}
	if got := h.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", got)
	}
	var env envelope
	dec := json.NewDecoder(bytes.NewReader(w.Body.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		t.Fatalf("body %q: %v", w.Body.String(), err)
	}
	if env.RequestID != id {
		t.Errorf("request_id = %q, X-Request-ID = %q", env.RequestID, id)
	}
	if (env.Error == nil) == (env.Data == nil) {
		t.Errorf("body %s must have exactly one of data and error", w.Body.String())
	}
	return env
}
