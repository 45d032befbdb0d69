package httpx

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"github.com/gorilla/websocket"
)

func TestC1_CredentialsInURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		query    string
		rejected bool
	}{
		{name: "AccessToken", query: "access_token=SECRETVALUE", rejected: true},
		{name: "AccessTokenUpperCase", query: "ACCESS_TOKEN=SECRETVALUE", rejected: true},
		{name: "AccessTokenDashed", query: "access-token=SECRETVALUE", rejected: true},
		{name: "Token", query: "token=SECRETVALUE", rejected: true},
		{name: "TokenMixedCase", query: "Token=SECRETVALUE", rejected: true},
		{name: "IDToken", query: "id_token=SECRETVALUE", rejected: true},
		{name: "LeaseSecret", query: "lease_secret=SECRETVALUE", rejected: true},
		{name: "Secret", query: "secret=SECRETVALUE", rejected: true},
		{name: "ClientSecret", query: "client_secret=SECRETVALUE", rejected: true},
		{name: "APIKey", query: "api_key=SECRETVALUE", rejected: true},
		{name: "APIKeyCamelCase", query: "apiKey=SECRETVALUE", rejected: true},
		{name: "Key", query: "key=SECRETVALUE", rejected: true},
		{name: "Authorization", query: "Authorization=Bearer%20SECRETVALUE", rejected: true},
		{name: "Password", query: "password=SECRETVALUE", rejected: true},
		{name: "EscapedName", query: "access%5Ftoken=SECRETVALUE", rejected: true},
		{name: "WithoutValue", query: "token", rejected: true},
		{name: "AfterOthers", query: "limit=5&cursor=c&token=SECRETVALUE", rejected: true},
		{name: "AfterSemicolon", query: "limit=5;token=SECRETVALUE", rejected: true},
		{name: "BadEscapeInValue", query: "token=%zzSECRETVALUE", rejected: true},
		{name: "Allowed", query: "limit=5&cursor=c"},
		{name: "KeyInsideName", query: "monkey=1"},
		{name: "Keys", query: "keys=1"},
		{name: "TokenAsValue", query: "cursor=token"},
		{name: "NoQuery", query: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			logger, logs := testLogger()
			reached := false
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				reached = true
				WriteData(w, r, http.StatusOK, nil)
			})
			r := httptest.NewRequest(http.MethodGet, "/v1/subscriptions", nil)
			r.URL.RawQuery = tt.query
			w := serve(t, MiddlewareOptions{Logger: logger}, handler, r)
			env := checkEnvelope(t, w)
			if !tt.rejected {
				if !reached || w.Code != http.StatusOK {
					t.Fatalf("status %d, handler reached %v; want the request to pass", w.Code, reached)
				}
				return
			}
			if reached {
				t.Fatal("the handler ran for a request with a credential in the URL")
			}
			if w.Code != http.StatusBadRequest || env.Error.Code != CodeInvalidArgument || env.Error.Message != "credentials must not be sent in the URL" {
				t.Fatalf("status %d body %s", w.Code, w.Body)
			}
			if strings.Contains(w.Body.String()+logs.String(), "SECRETVALUE") {
				t.Fatalf("the credential leaked: body %s logs %s", w.Body, logs)
			}
		})
	}
}

func TestC12_Deadline(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		deadline time.Duration
		want     time.Duration
	}{
		{name: "Default", deadline: 0, want: 8 * time.Second},
		{name: "Negative", deadline: -time.Second, want: 8 * time.Second},
		{name: "Configured", deadline: 3 * time.Second, want: 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			logger, _ := testLogger()
			var got time.Duration
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				deadline, ok := r.Context().Deadline()
				if !ok {
					t.Error("request context has no deadline")
				}
				got = time.Until(deadline)
				WriteData(w, r, http.StatusOK, nil)
			})
			serve(t, MiddlewareOptions{Logger: logger, Deadline: tt.deadline}, handler, httptest.NewRequest(http.MethodGet, "/", nil))
			if got > tt.want || got < tt.want-time.Second {
				t.Fatalf("deadline in %v, want about %v", got, tt.want)
			}
		})
	}

	t.Run("ExceededIsUnavailable", func(t *testing.T) {
		t.Parallel()
		logger, _ := testLogger()
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
			WriteError(w, r, r.Context().Err())
		})
		w := serve(t, MiddlewareOptions{Logger: logger, Deadline: 10 * time.Millisecond}, handler, httptest.NewRequest(http.MethodGet, "/", nil))
		env := checkEnvelope(t, w)
		if w.Code != http.StatusServiceUnavailable || env.Error.Code != CodeUnavailable || env.Error.Message != "request deadline exceeded" {
			t.Fatalf("status %d body %s", w.Code, w.Body)
		}
	})
}

func TestC12_NoDeadline(t *testing.T) {
	t.Parallel()

	t.Run("DeadlineDoesNotApply", func(t *testing.T) {
		t.Parallel()
		logger, _ := testLogger()
		router := mux.NewRouter()
		router.HandleFunc("/v1/events/connect/{id}", func(w http.ResponseWriter, r *http.Request) {
			outer := r.Context()
			NoDeadline(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				<-outer.Done() // the Middleware deadline has passed
				ctx := r.Context()
				if _, ok := ctx.Deadline(); ok {
					t.Error("context under NoDeadline has a deadline")
				}
				if err := ctx.Err(); err != nil {
					t.Errorf("context under NoDeadline ended with the deadline: %v", err)
				}
				if id := mux.Vars(r)["id"]; id != "abc" {
					t.Errorf("route variable id = %q, want abc", id)
				}
				if RequestID(ctx) != RequestID(outer) || RequestID(ctx) == "" {
					t.Errorf("request id %q, want %q", RequestID(ctx), RequestID(outer))
				}
				WriteData(w, r, http.StatusOK, nil)
			})).ServeHTTP(w, r)
		})
		w := serve(t, MiddlewareOptions{Logger: logger, Deadline: 5 * time.Millisecond}, router, httptest.NewRequest(http.MethodGet, "/v1/events/connect/abc", nil))
		if w.Code != http.StatusOK {
			t.Fatalf("status %d body %s", w.Code, w.Body)
		}
	})

	t.Run("ClientCancellationStillApplies", func(t *testing.T) {
		t.Parallel()
		logger, _ := testLogger()
		started := make(chan struct{})
		cause := errors.New("client went away")
		var got error
		handler := NoDeadline(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-r.Context().Done()
			got = context.Cause(r.Context())
			WriteError(w, r, r.Context().Err())
		}))
		base, cancel := context.WithCancelCause(context.Background())
		r := httptest.NewRequestWithContext(base, http.MethodGet, "/", nil)
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- serve(t, MiddlewareOptions{Logger: logger}, handler, r) }()
		<-started
		cancel(cause)
		w := <-done
		if got != cause {
			t.Fatalf("cause = %v, want %v", got, cause)
		}
		if env := checkEnvelope(t, w); w.Code != http.StatusServiceUnavailable || env.Error.Message != "request canceled" {
			t.Fatalf("status %d body %s", w.Code, w.Body)
		}
	})

	t.Run("OutsideMiddleware", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		var hasDeadline bool
		h := NoDeadline(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, hasDeadline = r.Context().Deadline()
		}))
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil))
		if !hasDeadline {
			t.Fatal("NoDeadline outside Middleware removed the caller's deadline")
		}
	})
}

func TestC17_UpgradeThroughMiddleware(t *testing.T) {
	t.Parallel()
	logger, logs := testLogger()
	upgrader := websocket.Upgrader{Subprotocols: []string{"orbit.events.v1"}}
	router := mux.NewRouter()
	router.HandleFunc("/v1/events/connect", func(w http.ResponseWriter, r *http.Request) {
		outer := r.Context()
		NoDeadline(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			conn, err := upgrader.Upgrade(w, r, nil)
			if err != nil {
				t.Errorf("upgrade: %v", err)
				return
			}
			defer conn.Close()
			// Echo only once the Middleware deadline has passed.
			<-outer.Done()
			for {
				kind, msg, err := conn.ReadMessage()
				if err != nil {
					return
				}
				if err := r.Context().Err(); err != nil {
					t.Errorf("connection context ended: %v", err)
				}
				if err := conn.WriteMessage(kind, msg); err != nil {
					return
				}
			}
		})).ServeHTTP(w, r)
	}).Methods(http.MethodGet)
	router.HandleFunc("/flush", func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
			t.Errorf("SetWriteDeadline through the wrapper: %v", err)
		}
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		_, _ = w.Write([]byte(`{}`))
	})

	served := make(chan struct{}, 2)
	mw := Middleware(MiddlewareOptions{Logger: logger, Deadline: 5 * time.Millisecond}, router)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mw.ServeHTTP(w, r)
		served <- struct{}{}
	}))
	defer srv.Close()

	dialer := websocket.Dialer{Subprotocols: []string{"orbit.events.v1"}}
	conn, resp, err := dialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/v1/events/connect", nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	resp.Body.Close()
	if resp.Header.Get("Sec-WebSocket-Protocol") != "orbit.events.v1" {
		t.Errorf("sub-protocol = %q", resp.Header.Get("Sec-WebSocket-Protocol"))
	}
	for _, msg := range []string{`{"n":1}`, `{"n":2}`} {
		if err := conn.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatalf("write: %v", err)
		}
		_, got, err := conn.ReadMessage()
		if err != nil || string(got) != msg {
			t.Fatalf("echo = %q, %v; want %q", got, err, msg)
		}
	}
	conn.Close()
	<-served

	res, err := srv.Client().Get(srv.URL + "/flush")
	if err != nil {
		t.Fatalf("GET /flush: %v", err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	<-served

	var statuses []float64
	for _, rec := range logs.records(t) {
		if rec["msg"] == "request" {
			statuses = append(statuses, rec["status"].(float64))
		}
	}
	if len(statuses) != 2 || statuses[0] != http.StatusSwitchingProtocols || statuses[1] != http.StatusOK {
		t.Fatalf("logged statuses %v, want [101 200]; logs %s", statuses, logs)
	}
}

func TestC6_PanicAfterResponseStarted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		panic  any
		logged bool
	}{
		{name: "Value", panic: "late failure", logged: true},
		{name: "AbortHandler", panic: http.ErrAbortHandler, logged: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			logger, logs := testLogger()
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				WriteData(w, r, http.StatusOK, nil)
				panic(tt.panic)
			})
			w := httptest.NewRecorder()
			func() {
				defer func() {
					if p := recover(); p != http.ErrAbortHandler {
						t.Errorf("panic = %v, want http.ErrAbortHandler", p)
					}
				}()
				Middleware(MiddlewareOptions{Logger: logger}, handler).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
			}()
			if got := strings.Contains(logs.String(), "panic serving request"); got != tt.logged {
				t.Errorf("panic logged = %v, want %v; logs %s", got, tt.logged, logs)
			}
			if !strings.Contains(logs.String(), `"msg":"request"`) {
				t.Errorf("no access log line; logs %s", logs)
			}
		})
	}
}

func TestC6_AccessLog(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		method string
		target string
		route  string
		status float64
		// code is the error code the line names; the test router's own
		// 404 and 405 are not written by this package, so they have none.
		code string
	}{
		{name: "Route", method: http.MethodGet, target: "/v1/things/abc?x=1", route: "/v1/things/{id}", status: 200},
		{name: "UnknownRoute", method: http.MethodGet, target: "/v1/nothing", route: "", status: 404},
		{name: "WrongMethod", method: http.MethodPatch, target: "/v1/things/abc", route: "", status: 405},
		{name: "Panic", method: http.MethodGet, target: "/panic", route: "/panic", status: 500, code: "INTERNAL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			logger, logs := testLogger()
			r := httptest.NewRequest(tt.method, tt.target, nil)
			r.RemoteAddr = "203.0.113.7:4242"
			w := serve(t, MiddlewareOptions{Logger: logger}, testRouter(), r)
			id := w.Header().Get("X-Request-ID")
			var access []map[string]any
			for _, rec := range logs.records(t) {
				if rec["msg"] == "request" {
					access = append(access, rec)
				}
			}
			if len(access) != 1 {
				t.Fatalf("%d access log lines, want 1; logs %s", len(access), logs)
			}
			rec := access[0]
			want := map[string]any{
				"level":       "INFO",
				"method":      tt.method,
				"route":       tt.route,
				"status":      tt.status,
				"request_id":  id,
				"remote_addr": "203.0.113.7:4242",
			}
			for k, v := range want {
				if rec[k] != v {
					t.Errorf("%s = %v, want %v", k, rec[k], v)
				}
			}
			if _, ok := rec["duration"].(float64); !ok {
				t.Errorf("duration = %v, want a number", rec["duration"])
			}
			if code, _ := rec["code"].(string); code != tt.code {
				t.Errorf("code = %q, want %q", code, tt.code)
			}
			for k := range rec {
				switch k {
				case "time", "level", "msg", "method", "route", "status", "duration", "request_id", "remote_addr", "code":
				default:
					t.Errorf("unexpected access log attribute %q", k)
				}
			}
		})
	}
}

func TestC4_LogsNoSecrets(t *testing.T) {
	t.Parallel()
	const (
		token     = "orb_TOKENSECRET0123456789abcdefghijklmnopqrstu"
		bodyValue = "BODYSECRET-task-input"
		queryVal  = "CURSORSECRET"
		pathValue = "PATHVALUE"
		idemKey   = "IDEMKEYSECRET"
	)
	tests := []struct {
		name   string
		method string
		target string
		body   string
	}{
		{name: "Created", method: http.MethodPost, target: "/v1/things", body: `{"name":"` + bodyValue + `"}`},
		{name: "InvalidBody", method: http.MethodPost, target: "/v1/things", body: `{"name":"` + bodyValue + `","extra":"` + bodyValue + `"}`},
		{name: "TruncatedBody", method: http.MethodPost, target: "/v1/things", body: `{"name":"` + bodyValue},
		{name: "Query", method: http.MethodGet, target: "/v1/list?cursor=" + queryVal},
		{name: "BadQuery", method: http.MethodGet, target: "/v1/list?cursor=" + queryVal + "&cursor=" + queryVal},
		{name: "Path", method: http.MethodGet, target: "/v1/things/" + pathValue},
		{name: "UnknownPath", method: http.MethodGet, target: "/v1/" + pathValue},
		{name: "CredentialInQuery", method: http.MethodGet, target: "/v1/list?token=" + token},
		{name: "Internal", method: http.MethodGet, target: "/fail?cursor=" + queryVal},
		{name: "Panic", method: http.MethodPost, target: "/panic", body: `{"name":"` + bodyValue + `"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			logger, logs := testLogger()
			r := httptest.NewRequest(tt.method, tt.target, strings.NewReader(tt.body))
			r.Header.Set("Authorization", "Bearer "+token)
			r.Header.Set("Idempotency-Key", idemKey)
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Cookie", "session="+token)
			w := serve(t, MiddlewareOptions{Logger: logger}, testRouter(), r)
			out := logs.String()
			if !strings.Contains(out, `"msg":"request"`) || !strings.Contains(out, w.Header().Get("X-Request-ID")) {
				t.Fatalf("no access log line for the request; logs %s", out)
			}
			for _, secret := range []string{token, "TOKENSECRET", bodyValue, queryVal, pathValue, idemKey, "Bearer", "Authorization"} {
				if strings.Contains(out, secret) {
					t.Errorf("logs contain %q: %s", secret, out)
				}
			}
			for _, secret := range []string{token, bodyValue, queryVal, idemKey} {
				if strings.Contains(w.Body.String(), secret) {
					t.Errorf("response contains %q: %s", secret, w.Body)
				}
			}
		})
	}
}
