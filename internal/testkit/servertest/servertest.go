// Package servertest runs a real orbit server for tests: a fresh migrated
// database from internal/testkit/testdb, every server module, and an
// httptest server on a loopback port.
//
// It is the one package under internal/ that imports modules (the module
// host, modules/all and cmd/orbit/server): starting a whole server needs
// them. Kits under internal/ import nothing of modules/.
package servertest

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/orbitrun/orbit/cmd/orbit/server"
	"github.com/orbitrun/orbit/config"
	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/metrics"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
	"github.com/orbitrun/orbit/modules"
	"github.com/orbitrun/orbit/modules/admin"
	_ "github.com/orbitrun/orbit/modules/all"
)

// Server is a running test server.
type Server struct {
	URL    string
	DB     *sql.DB
	Config *config.Config
	// Instances are the module instances the server runs, for tests that
	// reach into a module.
	Instances modules.Instances
	// Routes are every route of the server, for tests that cover each.
	Routes []server.Route
	// MetricsURL is the address of GET /metrics on the server's separate
	// metrics listener (a free loopback port, never 9090, so parallel
	// tests never collide), or "" when an option set
	// server.metrics_listen empty.
	MetricsURL string
	// NodeID is the server's node id (modules.Env.NodeID).
	NodeID string
	srv    *server.Server
	logs   *lockedWriter
}

// Logs returns everything the server has logged so far.
func (s *Server) Logs() string {
	s.logs.mu.Lock()
	defer s.logs.mu.Unlock()
	return s.logs.buf.String()
}

// Option changes the config or module instances before the server starts.
type Option func(cfg *config.Config, in modules.Instances)

// Start runs a server on a fresh database until the test ends.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	return StartOn(t, testdb.New(t), opts...)
}

// StartOn is Start on a database the test provides, such as one on a
// testdb.NewServer whose server the test stops and starts again. The pool
// must hold the platform schema.
func StartOn(t testing.TB, pool *sql.DB, opts ...Option) *Server {
	t.Helper()
	return startOn(t, pool, nil, opts)
}

// StartTraced is Start with tp as the node's tracer provider, as `orbit
// serve` has one when tracing.otlp_endpoint is set: tests give one with an
// in-memory exporter (go.opentelemetry.io/otel/sdk/trace/tracetest).
func StartTraced(t testing.TB, tp trace.TracerProvider, opts ...Option) *Server {
	t.Helper()
	return startOn(t, testdb.New(t), tp, opts)
}

func startOn(t testing.TB, pool *sql.DB, tp trace.TracerProvider, opts []Option) *Server {
	t.Helper()
	cfg := config.Default()
	cfg.Server.MetricsListen = "127.0.0.1:0"
	in := modules.NewInstances()
	for _, o := range opts {
		o(cfg, in)
	}
	if err := in.Validate(); err != nil {
		t.Fatalf("servertest: module config: %v", err)
	}
	logs := &lockedWriter{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx := context.Background()
	srv, err := server.New(ctx, server.Params{Config: cfg, DB: pool, Logger: logger, Instances: in, Tracing: tp})
	if err != nil {
		t.Fatalf("servertest: %v", err)
	}
	if err := srv.StartModules(ctx); err != nil {
		t.Fatalf("servertest: start modules: %v", err)
	}
	// The node's own http.Server and listener, so that its timeouts and
	// connection limit hold in tests too.
	hs := httptest.NewUnstartedServer(nil)
	hs.Config = srv.HTTPServer()
	hs.Listener = srv.Listener(hs.Listener)
	hs.Start()
	var metricsURL string
	if cfg.Server.MetricsListen != "" {
		mln, err := net.Listen("tcp", cfg.Server.MetricsListen)
		if err != nil {
			t.Fatalf("servertest: metrics listener: %v", err)
		}
		srv.ServeMetrics(mln)
		metricsURL = "http://" + mln.Addr().String() + "/metrics"
	}
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Stop(stopCtx); err != nil {
			t.Errorf("servertest: stop: %v", err)
		}
		logged := (&Server{logs: logs}).Logs()
		for _, secret := range Secrets(logged) {
			t.Errorf("servertest: the server logged a secret (%.12s…): %s", secret, logged)
		}
	})
	return &Server{URL: hs.URL, DB: pool, Config: cfg, Instances: in, Routes: srv.Routes(), MetricsURL: metricsURL, NodeID: srv.NodeID(), srv: srv, logs: logs}
}

// RefreshMetrics recomputes the server's database-backed gauges now, as
// its background collector does every metrics.refresh_interval.
func (s *Server) RefreshMetrics(t testing.TB) metrics.Cost {
	t.Helper()
	cost, err := s.srv.RefreshMetrics(context.Background())
	if err != nil {
		t.Fatalf("servertest: refresh metrics: %v", err)
	}
	return cost
}

// Scrape returns the text of GET /metrics on the metrics listener.
func (s *Server) Scrape(t testing.TB) string {
	t.Helper()
	if s.MetricsURL == "" {
		t.Fatal("servertest: metrics are disabled on this server")
	}
	resp, err := http.Get(s.MetricsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("servertest: GET /metrics: %d: %s", resp.StatusCode, body)
	}
	return string(body)
}

// Metrics returns the server's registry, for tests that gather it.
func (s *Server) Metrics() *metrics.Registry { return s.srv.Metrics() }

// Credential is a credential made for a test.
type Credential struct {
	Token string
	admin.Scope
	CredentialID string
}

// CredentialParams describe a test credential. Empty names get defaults
// ("ns", "app", "env", "q").
type CredentialParams struct {
	Namespace, Application, Environment, Queue string
	Permissions                                []string
	// NoQueueGrant leaves the queue ungranted.
	NoQueueGrant bool
}

// Credential creates a credential directly in the database.
func (s *Server) Credential(t testing.TB, p CredentialParams) Credential {
	t.Helper()
	def := func(v, d string) string {
		if v == "" {
			return d
		}
		return v
	}
	store := admin.NewStore(s.DB)
	ctx := context.Background()
	sc, err := store.ScopeEnsure(ctx, &admin.ScopeEnsureParams{
		Namespace: def(p.Namespace, "ns"), Application: def(p.Application, "app"),
		Environment: def(p.Environment, "env"), Queue: def(p.Queue, "q"),
	})
	if err != nil {
		t.Fatal(err)
	}
	var queues []string
	if !p.NoQueueGrant {
		queues = []string{sc.QueueID}
	}
	cred, token, err := store.CredentialCreate(ctx, &admin.CredentialCreateParams{
		NamespaceID: sc.NamespaceID, ApplicationID: sc.ApplicationID, EnvironmentID: sc.EnvironmentID,
		Permissions: p.Permissions, Queues: queues,
	})
	if err != nil {
		t.Fatal(err)
	}
	return Credential{Token: token, Scope: sc, CredentialID: cred.ID}
}

// Response is a decoded envelope and the raw reply.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	// Envelope fields.
	RequestID string          `json:"request_id"`
	Data      json.RawMessage `json:"data"`
	Error     *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// Request describes one HTTP call.
type Request struct {
	Method string
	Path   string // with query string
	Token  string
	// Body is sent as is (application/json unless ContentType is set).
	Body           string
	ContentType    string
	IdempotencyKey string
	Header         http.Header
}

// Do sends req and decodes the envelope. It fails the test only on transport
// errors.
func (s *Server) Do(t testing.TB, req Request) *Response {
	t.Helper()
	var body io.Reader
	if req.Body != "" {
		body = bytes.NewBufferString(req.Body)
	}
	hr, err := http.NewRequest(req.Method, s.URL+req.Path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range req.Header {
		for _, v := range vs {
			hr.Header.Add(k, v)
		}
	}
	if req.Token != "" {
		hr.Header.Set("Authorization", "Bearer "+req.Token)
	}
	if req.Body != "" {
		ct := req.ContentType
		if ct == "" {
			ct = "application/json"
		}
		hr.Header.Set("Content-Type", ct)
	}
	if req.IdempotencyKey != "" {
		hr.Header.Set("Idempotency-Key", req.IdempotencyKey)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := &Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%s %s: reply is not an envelope: %v: %s", req.Method, req.Path, err, raw)
	}
	return out
}

// Code returns the error code of the reply, or "" when it succeeded.
func (r *Response) Code() string {
	if r.Error == nil {
		return ""
	}
	return r.Error.Code
}

// lockedWriter serialises writes of concurrent request logs.
type lockedWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// ModuleConfig changes the config section of module id, of type C, before
// the server starts.
func ModuleConfig[C any](id string, change func(*C)) Option {
	return func(_ *config.Config, in modules.Instances) {
		change(in[id].(modules.Configurer).Config().(*C))
	}
}

// RenameTable renames a table of the server's database, so that the
// statements using it fail until it is renamed back.
func (s *Server) RenameTable(t testing.TB, from, to string) {
	t.Helper()
	if _, err := s.DB.Exec("RENAME TABLE " + from + " TO " + to); err != nil {
		t.Fatalf("servertest: rename %s to %s: %v", from, to, err)
	}
}

// CursorWithTime returns cursor, a next_cursor from a list, with the
// position's seconds since 1970 replaced by seconds: an edited cursor, as a
// client could forge one. The cursor layout is httpx's: version (1 byte),
// binding digest (16 bytes), seconds (8 bytes, big endian), …
func CursorWithTime(t testing.TB, cursor string, seconds int64) string {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || len(b) < 25 {
		t.Fatalf("servertest: %q is not a cursor", cursor)
	}
	binary.BigEndian.PutUint64(b[17:25], uint64(seconds))
	return base64.RawURLEncoding.EncodeToString(b)
}

// Authenticator returns the running admin module as the auth.Authenticator
// the other modules use, for tests that drive a store directly.
func (s *Server) Authenticator(t testing.TB) auth.Authenticator {
	t.Helper()
	a, ok := s.Instances["admin"].(auth.Authenticator)
	if !ok {
		t.Fatal("servertest: the admin module does not offer an auth.Authenticator")
	}
	return a
}

// WorkerGrant creates a credential in c's scope holding tasks:work and a
// grant on c's queue, and returns its grant: what a worker session's leases
// and completions check, for tests that drive the tasks store directly.
func (s *Server) WorkerGrant(t testing.TB, c Credential) auth.Grant {
	t.Helper()
	cred, _, err := admin.NewStore(s.DB).CredentialCreate(context.Background(), &admin.CredentialCreateParams{
		NamespaceID: c.NamespaceID, ApplicationID: c.ApplicationID, EnvironmentID: c.EnvironmentID,
		Label: "worker", Permissions: []string{auth.PermTasksWork}, Queues: []string{c.QueueID},
	})
	if err != nil {
		t.Fatal(err)
	}
	return auth.Grant{CredentialID: cred.ID, Permission: auth.PermTasksWork, QueueID: c.QueueID, What: "queue"}
}

// GrantChange is one way a credential loses what a connection needs, with
// the error code the connection answers it with.
type GrantChange struct {
	Name  string
	Code  string
	Apply func(t testing.TB, credentialID string)
}

// GrantChanges returns the three ways a credential loses permission on the
// server's database: revoked (UNAUTHENTICATED), permission removed
// (PERMISSION_DENIED), every queue grant removed (NOT_FOUND).
func (s *Server) GrantChanges(permission string) []GrantChange {
	exec := func(t testing.TB, query string, args ...any) {
		t.Helper()
		if _, err := s.DB.Exec(query, args...); err != nil {
			t.Fatal(err)
		}
	}
	return []GrantChange{
		{"Revoked", "UNAUTHENTICATED", func(t testing.TB, id string) {
			if err := admin.NewStore(s.DB).CredentialRevoke(context.Background(), id, "test"); err != nil {
				t.Fatal(err)
			}
		}},
		{"LostPermission", "PERMISSION_DENIED", func(t testing.TB, id string) {
			exec(t, `DELETE FROM credential_permissions WHERE credential_id = ? AND permission = ?`, id, permission)
		}},
		{"LostQueueGrant", "NOT_FOUND", func(t testing.TB, id string) {
			exec(t, `DELETE FROM credential_queue_grants WHERE credential_id = ?`, id)
		}},
	}
}

// secretPattern matches what the server must never log: a bearer token
// ("orbit_" and 43 base64url characters) or a lease secret (43 base64url
// characters standing alone; IDs and request ids are 32 hex characters).
var secretPattern = regexp.MustCompile(`orbit_[A-Za-z0-9_-]{43}|(?:^|[^A-Za-z0-9_-])([A-Za-z0-9_-]{43})(?:[^A-Za-z0-9_-]|$)`)

// Secrets returns the tokens and lease secrets found in logs. Every test
// server's logs are scanned when its test ends, and a hit fails the test.
func Secrets(logs string) []string {
	var found []string
	for _, m := range secretPattern.FindAllStringSubmatch(logs, -1) {
		if m[1] != "" {
			found = append(found, m[1])
		} else {
			found = append(found, m[0])
		}
	}
	return found
}
