package httpx

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/go-sql-driver/mysql"
)

func TestC6_Envelope(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		method     string
		target     string
		body       string
		status     int
		code       Code   // "" for a data envelope
		message    string // checked when not ""
		data       string // checked when not ""
		allow      string
		retryAfter string
	}{
		{name: "Data", method: http.MethodGet, target: "/v1/things/abc", status: http.StatusOK},
		{name: "Created", method: http.MethodPost, target: "/v1/things", body: `{"name":"a"}`, status: http.StatusCreated, data: `{"created":true}`},
		{name: "NullData", method: http.MethodDelete, target: "/v1/things/abc", status: http.StatusOK, data: `null`},
		{name: "InvalidBody", method: http.MethodPost, target: "/v1/things", body: `{"Name":"a"}`, status: http.StatusBadRequest, code: CodeInvalidArgument, message: `unknown field "Name"`},
		{name: "MissingField", method: http.MethodPost, target: "/v1/things", body: `{}`, status: http.StatusBadRequest, code: CodeInvalidArgument, message: `missing required field "name"`},
		{name: "UnknownQuery", method: http.MethodGet, target: "/v1/list?limit=1&sort=asc", status: http.StatusBadRequest, code: CodeInvalidArgument, message: `unknown query parameter "sort"`},
		{name: "UnknownRoute", method: http.MethodGet, target: "/v1/nothing", status: http.StatusNotFound, code: CodeNotFound, message: "no route matches this path"},
		{name: "WrongMethod", method: http.MethodPut, target: "/v1/things/abc", status: http.StatusMethodNotAllowed, code: CodeMethodNotAllowed, allow: "GET, DELETE"},
		{name: "WrongMethodOnCollection", method: http.MethodGet, target: "/v1/things", status: http.StatusMethodNotAllowed, code: CodeMethodNotAllowed, allow: "POST"},
		{name: "Internal", method: http.MethodGet, target: "/fail", status: http.StatusInternalServerError, code: CodeInternal, message: "internal error"},
		{name: "CapacityExceeded", method: http.MethodGet, target: "/busy", status: http.StatusTooManyRequests, code: CodeCapacityExceeded, retryAfter: "1"},
		{name: "Panic", method: http.MethodGet, target: "/panic", status: http.StatusInternalServerError, code: CodeInternal, message: "internal error"},
		{name: "NoResponse", method: http.MethodGet, target: "/silent", status: http.StatusInternalServerError, code: CodeInternal, message: "internal error"},
		{name: "CredentialInURL", method: http.MethodGet, target: "/v1/things/abc?access_token=x", status: http.StatusBadRequest, code: CodeInvalidArgument, message: "credentials must not be sent in the URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			logger, _ := testLogger()
			r := httptest.NewRequest(tt.method, tt.target, strings.NewReader(tt.body))
			if tt.body != "" {
				r.Header.Set("Content-Type", "application/json")
			}
			w := serve(t, MiddlewareOptions{Logger: logger}, testRouter(), r)
			if w.Code != tt.status {
				t.Fatalf("status = %d, want %d; body %s", w.Code, tt.status, w.Body)
			}
			env := checkEnvelope(t, w)
			if tt.code == "" {
				if env.Error != nil {
					t.Fatalf("error = %+v, want data", env.Error)
				}
				if tt.data != "" && string(env.Data) != tt.data {
					t.Fatalf("data = %s, want %s", env.Data, tt.data)
				}
			} else {
				if env.Error == nil || env.Error.Code != tt.code {
					t.Fatalf("body %s, want error code %s", w.Body, tt.code)
				}
				if tt.message != "" && env.Error.Message != tt.message {
					t.Fatalf("message = %q, want %q", env.Error.Message, tt.message)
				}
			}
			if got := w.Header().Get("Allow"); got != tt.allow {
				t.Errorf("Allow = %q, want %q", got, tt.allow)
			}
			if got := w.Header().Get("Retry-After"); got != tt.retryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tt.retryAfter)
			}
			if got := w.Header().Get("X-Partial"); got != "" {
				t.Errorf("header set before a panic survived: X-Partial = %q", got)
			}
		})
	}

	t.Run("RequestIDInContext", func(t *testing.T) {
		t.Parallel()
		logger, _ := testLogger()
		w := serve(t, MiddlewareOptions{Logger: logger}, testRouter(), httptest.NewRequest(http.MethodGet, "/v1/things/abc", nil))
		env := checkEnvelope(t, w)
		if want := `{"id":"abc","request_id":"` + env.RequestID + `"}`; string(env.Data) != want {
			t.Fatalf("data = %s, want %s", env.Data, want)
		}
	})

	t.Run("RequestIDsDiffer", func(t *testing.T) {
		t.Parallel()
		logger, _ := testLogger()
		seen := map[string]bool{}
		for range 50 {
			w := serve(t, MiddlewareOptions{Logger: logger}, testRouter(), httptest.NewRequest(http.MethodGet, "/v1/things/abc", nil))
			id := checkEnvelope(t, w).RequestID
			if seen[id] {
				t.Fatalf("request id %s was given twice", id)
			}
			seen[id] = true
		}
	})

	t.Run("ClientRequestIDIgnored", func(t *testing.T) {
		t.Parallel()
		logger, _ := testLogger()
		r := httptest.NewRequest(http.MethodGet, "/v1/things/abc", nil)
		r.Header.Set("X-Request-ID", "77777777777777777777777777777777")
		w := serve(t, MiddlewareOptions{Logger: logger}, testRouter(), r)
		if id := checkEnvelope(t, w).RequestID; id == "77777777777777777777777777777777" {
			t.Fatal("the client's request id was used")
		}
	})

	t.Run("HeadersOnRawResponse", func(t *testing.T) {
		t.Parallel()
		logger, _ := testLogger()
		w := serve(t, MiddlewareOptions{Logger: logger}, testRouter(), httptest.NewRequest(http.MethodGet, "/raw", nil))
		h := w.Header()
		if !ValidID(h.Get("X-Request-ID")) || h.Get("Cache-Control") != "no-store" || h.Get("Content-Type") != "application/json" {
			t.Fatalf("headers = %v", h)
		}
	})

	t.Run("DeterministicData", func(t *testing.T) {
		t.Parallel()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		w := httptest.NewRecorder()
		WriteData(w, r, http.StatusOK, map[string]any{"b": 1, "a": []string(nil), "c": Uint64(9)})
		env := checkEnvelope(t, w)
		if want := `{"a":[],"b":1,"c":"9"}`; string(env.Data) != want {
			t.Fatalf("data = %s, want %s", env.Data, want)
		}
	})

	t.Run("UnencodableData", func(t *testing.T) {
		t.Parallel()
		logger, logs := testLogger()
		router := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			WriteData(w, r, http.StatusOK, map[string]any{"f": func() {}})
		})
		w := serve(t, MiddlewareOptions{Logger: logger}, router, httptest.NewRequest(http.MethodGet, "/", nil))
		env := checkEnvelope(t, w)
		if w.Code != http.StatusInternalServerError || env.Error == nil || env.Error.Code != CodeInternal {
			t.Fatalf("status %d body %s, want INTERNAL", w.Code, w.Body)
		}
		if !strings.Contains(logs.String(), "internal error") {
			t.Fatalf("logs %s do not record the encoding failure", logs)
		}
	})
}

func TestC7_WriteError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		err     error
		code    Code
		message string
		logged  string // the cause that must be logged, if any
	}{
		{name: "Error", err: Errorf(CodeNotFound, "subscription not found"), code: CodeNotFound, message: "subscription not found"},
		{name: "WrappedError", err: fmt.Errorf("subscriptions: get: %w", Errorf(CodeStateConflict, "revision mismatch")), code: CodeStateConflict, message: "revision mismatch"},
		{name: "EventHistoryExpired", err: Errorf(CodeEventHistoryExpired, "history expired"), code: CodeEventHistoryExpired, message: "history expired"},
		{name: "ProtocolRequired", err: Errorf(CodeProtocolRequired, "use orbit.events.v1"), code: CodeProtocolRequired, message: "use orbit.events.v1"},
		{name: "DeadlineExceeded", err: context.DeadlineExceeded, code: CodeUnavailable, message: "request deadline exceeded"},
		{name: "WrappedDeadlineExceeded", err: fmt.Errorf("store: begin: %w", context.DeadlineExceeded), code: CodeUnavailable, message: "request deadline exceeded"},
		{name: "Canceled", err: fmt.Errorf("store: %w", context.Canceled), code: CodeUnavailable, message: "request canceled"},
		{name: "Other", err: errors.New("store: insert: duplicate entry 'hunter2'"), code: CodeInternal, message: "internal error", logged: "store: insert: duplicate entry 'hunter2'"},
		{name: "TypedNil", err: (*Error)(nil), code: CodeInternal, message: "internal error", logged: "WriteError called with a nil *Error"},
		{name: "Nil", err: nil, code: CodeInternal, message: "internal error", logged: "WriteError called with a nil error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			logger, logs := testLogger()
			var id string
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				id = RequestID(r.Context())
				WriteError(w, r, tt.err)
			})
			w := serve(t, MiddlewareOptions{Logger: logger}, handler, httptest.NewRequest(http.MethodGet, "/", nil))
			env := checkEnvelope(t, w)
			if w.Code != tt.code.Status() || env.Error == nil || env.Error.Code != tt.code || env.Error.Message != tt.message {
				t.Fatalf("status %d body %s, want %d %s %q", w.Code, w.Body, tt.code.Status(), tt.code, tt.message)
			}
			if env.RequestID != id {
				t.Fatalf("request_id = %s, RequestID in handler = %s", env.RequestID, id)
			}
			if strings.Contains(w.Body.String(), "hunter2") {
				t.Fatalf("body %s leaks the internal error", w.Body)
			}
			var logged string
			for _, rec := range logs.records(t) {
				if rec["msg"] == "internal error" {
					logged, _ = rec["error"].(string)
					if rec["request_id"] != id || rec["level"] != "ERROR" {
						t.Errorf("internal error record %v, want level ERROR and request_id %s", rec, id)
					}
				}
			}
			if logged != tt.logged {
				t.Fatalf("logged cause %q, want %q; logs %s", logged, tt.logged, logs)
			}
		})
	}

	t.Run("WithoutMiddleware", func(t *testing.T) {
		t.Parallel()
		w := httptest.NewRecorder()
		WriteError(w, httptest.NewRequest(http.MethodGet, "/", nil), Errorf(CodeCapacityExceeded, "node is full"))
		env := checkEnvelope(t, w)
		if w.Code != http.StatusTooManyRequests || env.Error.Code != CodeCapacityExceeded || w.Header().Get("Retry-After") != "1" {
			t.Fatalf("status %d headers %v body %s", w.Code, w.Header(), w.Body)
		}
	})

	t.Run("InvalidUTF8Message", func(t *testing.T) {
		t.Parallel()
		w := httptest.NewRecorder()
		WriteError(w, httptest.NewRequest(http.MethodGet, "/", nil), Errorf(CodeInvalidArgument, "bad \xff"))
		env := checkEnvelope(t, w)
		if env.Error.Message != "bad \uFFFD" {
			t.Fatalf("message = %q", env.Error.Message)
		}
	})
}

// TestC7_DatabaseDownIsUnavailable: an error that says the database cannot
// be reached, however deeply wrapped, is 503 UNAVAILABLE with Retry-After
// and logged as a warning, not 500 INTERNAL; UNAVAILABLE from a handler
// carries Retry-After too.
func TestC7_DatabaseDownIsUnavailable(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	tests := []struct {
		name    string
		err     error
		message string
		warned  bool // logged as "database unavailable"
	}{
		{name: "ConnectionRefused", err: fmt.Errorf("auth: look up credential: %w", refused), message: ErrDatabaseUnavailable.Message, warned: true},
		{name: "BadConn", err: fmt.Errorf("tasks: submit: %w", driver.ErrBadConn), message: ErrDatabaseUnavailable.Message, warned: true},
		{name: "InvalidConn", err: fmt.Errorf("tasks: list: %w", mysql.ErrInvalidConn), message: ErrDatabaseUnavailable.Message, warned: true},
		{name: "ServerGone", err: fmt.Errorf("idem: %w", &mysql.MySQLError{Number: 2006, Message: "MySQL server has gone away"}), message: ErrDatabaseUnavailable.Message, warned: true},
		{name: "ServerShutdown", err: &mysql.MySQLError{Number: 1053, Message: "Server shutdown in progress"}, message: ErrDatabaseUnavailable.Message, warned: true},
		{name: "Handler", err: Errorf(CodeUnavailable, "database unreachable"), message: "database unreachable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			logger, logs := testLogger()
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { WriteError(w, r, tt.err) })
			w := serve(t, MiddlewareOptions{Logger: logger}, handler, httptest.NewRequest(http.MethodGet, "/", nil))
			env := checkEnvelope(t, w)
			if w.Code != http.StatusServiceUnavailable || env.Error == nil || env.Error.Code != CodeUnavailable || env.Error.Message != tt.message {
				t.Fatalf("status %d body %s, want 503 UNAVAILABLE %q", w.Code, w.Body, tt.message)
			}
			if got := w.Header().Get("Retry-After"); got != "1" {
				t.Errorf("Retry-After = %q, want 1", got)
			}
			warned := false
			for _, rec := range logs.records(t) {
				switch rec["msg"] {
				case "internal error":
					t.Errorf("logged as an internal error: %v", rec)
				case "database unavailable":
					warned = rec["level"] == "WARN"
				}
			}
			if warned != tt.warned {
				t.Errorf("warned = %v, want %v; logs %s", warned, tt.warned, logs)
			}
		})
	}
}
