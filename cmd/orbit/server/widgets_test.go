package server_test

// testwidgets is a module that exists only in this test binary. It is built
// from the same kit as the platform modules (auth.Require, httpx strict input,
// idem.Handle, cursors), so that every convention of docs 02 (C-1 … C-16) can
// be driven end to end through one small, fully controlled API.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/idem"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/modules"
	"github.com/orbitrun/orbit/modules/admin"
)

func init() { modules.Register(&widgets{}) }

// widgets is the testwidgets module. Its API:
//
//	POST /v1/test-widgets             tasks:submit  {name, count?, tags?} → 201 {widget, deduplicated}
//	GET  /v1/test-widgets             tasks:read    ?limit&cursor&name_prefix, newest first
//	GET  /v1/test-widgets/{id}        tasks:read    the caller's own widget, else 404
//	POST /v1/test-widgets/{id}:slow   tasks:submit  {} → adds 1 to count; blocks while
//	                                                another transaction holds the widget's row lock
//	GET  /v1/test-queues/{id}         tasks:read    a queue inside the caller's grants, else 404
//	GET  /v1/test-errors/{kind}       any           fails with the C-7 code kind, or "plain"
//	                                                (an unclassified error) or "panic"
type widgets struct {
	db   *sql.DB
	auth auth.Authenticator
}

func (*widgets) OrbitModule() modules.Info {
	return modules.Info{
		ID:       "testwidgets",
		Requires: []string{"admin"},
		Roles:    []string{"server"},
		New:      func() modules.Module { return &widgets{} },
	}
}

const createWidgetsTable = `CREATE TABLE IF NOT EXISTS test_widgets (
  id            CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  credential_id CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  namespace_id  CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  name          VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  counter       BIGINT UNSIGNED NOT NULL,
  tags          MEDIUMTEXT   CHARACTER SET utf8mb4 NOT NULL,
  created_at    DATETIME(6)  NOT NULL,
  PRIMARY KEY (id),
  KEY ix_test_widgets_list (credential_id, created_at, id)
) ENGINE=InnoDB`

// Provision creates the module's table in the server's database.
func (m *widgets) Provision(ctx context.Context, env *modules.Env) error {
	m.db = env.DB
	a, err := modules.Require[auth.Authenticator](env, "admin")
	if err != nil {
		return fmt.Errorf("testwidgets: %w", err)
	}
	m.auth = a
	if _, err := env.DB.ExecContext(ctx, createWidgetsTable); err != nil {
		return fmt.Errorf("testwidgets: create table: %w", err)
	}
	return nil
}

func (m *widgets) Routes(r *mux.Router) {
	a := m.auth
	r.Handle("/v1/test-widgets", auth.Require(a, auth.PermTasksSubmit, http.HandlerFunc(m.create))).Methods(http.MethodPost)
	r.Handle("/v1/test-widgets", auth.Require(a, auth.PermTasksRead, http.HandlerFunc(m.list))).Methods(http.MethodGet)
	r.Handle("/v1/test-widgets/{id}", auth.Require(a, auth.PermTasksRead, http.HandlerFunc(m.get))).Methods(http.MethodGet)
	r.Handle("/v1/test-widgets/{id}:slow", auth.Require(a, auth.PermTasksSubmit, http.HandlerFunc(m.slow))).Methods(http.MethodPost)
	r.Handle("/v1/test-queues/{id}", auth.Require(a, auth.PermTasksRead, http.HandlerFunc(m.queue))).Methods(http.MethodGet)
	r.Handle("/v1/test-errors/{kind}", auth.Require(a, "", http.HandlerFunc(m.fail))).Methods(http.MethodGet)
}

var (
	_ modules.Provisioner = (*widgets)(nil)
	_ modules.Router      = (*widgets)(nil)
)

// widget is a row of test_widgets.
type widget struct {
	ID, CredentialID, NamespaceID, Name string
	Count                               uint64
	Tags                                map[string]string
	CreatedAt                           time.Time
}

// widgetView is the wire form of a widget.
type widgetView struct {
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	Count     httpx.Uint64      `json:"count"`
	Tags      map[string]string `json:"tags"`
	CreatedAt string            `json:"created_at"`
}

func (w *widget) view() widgetView {
	return widgetView{ID: w.ID, Name: w.Name, Count: httpx.Uint64(w.Count), Tags: w.Tags, CreatedAt: httpx.FormatTime(w.CreatedAt)}
}

type widgetReceipt struct {
	Widget widgetView `json:"widget"`
}

type widgetPage struct {
	Items      []widgetView `json:"items"`
	NextCursor string       `json:"next_cursor,omitempty"`
}

const widgetColumns = `id, credential_id, namespace_id, name, counter, tags, created_at`

// querier is a pool or a transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func widgetInsert(ctx context.Context, q querier, w *widget) error {
	tags, err := json.Marshal(w.Tags)
	if err != nil {
		return err
	}
	_, err = q.ExecContext(ctx, `INSERT INTO test_widgets (`+widgetColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		w.ID, w.CredentialID, w.NamespaceID, w.Name, w.Count, tags, w.CreatedAt)
	return err
}

// widgetList returns up to limit widgets of a credential whose names start
// with prefix, newest first, after the cursor position when there is one.
func widgetList(ctx context.Context, q querier, credentialID, prefix string, after *httpx.Cursor, limit int) ([]widget, error) {
	query := `SELECT ` + widgetColumns + ` FROM test_widgets WHERE credential_id = ? AND LEFT(name, CHAR_LENGTH(?)) = ?`
	args := []any{credentialID, prefix, prefix}
	if after != nil {
		query += ` AND (created_at < ? OR (created_at = ? AND id < ?))`
		args = append(args, after.CreatedAt, after.CreatedAt, after.ID)
	}
	query += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	args = append(args, limit)
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []widget
	for rows.Next() {
		var (
			w    widget
			tags []byte
		)
		if err := rows.Scan(&w.ID, &w.CredentialID, &w.NamespaceID, &w.Name, &w.Count, &tags, &w.CreatedAt); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(tags, &w.Tags); err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// widgetGet returns a widget of the credential, or sql.ErrNoRows.
func widgetGet(ctx context.Context, q querier, credentialID, id string) (*widget, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+widgetColumns+` FROM test_widgets WHERE credential_id = ? AND id = ?`, credentialID, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var w widget
	var tags []byte
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, err
		}
		return nil, sql.ErrNoRows
	}
	if err := rows.Scan(&w.ID, &w.CredentialID, &w.NamespaceID, &w.Name, &w.Count, &tags, &w.CreatedAt); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(tags, &w.Tags); err != nil {
		return nil, err
	}
	return &w, nil
}

// readBody reads the body of a write, keeps the raw bytes for the
// idempotency digest and decodes it strictly into dst. The write takes no
// query parameters.
func readBody(r *http.Request, dst any) ([]byte, error) {
	return httpx.ReadJSON(r, dst)
}

type createWidgetRequest struct {
	Name  *string           `json:"name"`
	Count *httpx.Uint64     `json:"count"`
	Tags  map[string]string `json:"tags"`
}

func (m *widgets) create(w http.ResponseWriter, r *http.Request) {
	p := auth.FromContext(r.Context())
	var req createWidgetRequest
	raw, err := readBody(r, &req)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	if err := httpx.Required(httpx.Field{Path: "name", Present: req.Name != nil}); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	if !httpx.ValidName(*req.Name, 128) {
		httpx.WriteError(w, r, httpx.Errorf(httpx.CodeInvalidArgument, "name must be 1 to 128 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit"))
		return
	}
	wd := &widget{CredentialID: p.CredentialID, NamespaceID: p.NamespaceID, Name: *req.Name, Tags: req.Tags}
	if req.Count != nil {
		wd.Count = uint64(*req.Count)
	}
	if wd.Tags == nil {
		wd.Tags = map[string]string{}
	}
	idem.Handle(w, r, m.db, p.CredentialID, raw, func(ctx context.Context, tx *sql.Tx) (int, any, error) {
		wd.ID, wd.CreatedAt = db.NewID(), db.Now()
		if err := widgetInsert(ctx, tx, wd); err != nil {
			return 0, nil, err
		}
		return http.StatusCreated, widgetReceipt{Widget: wd.view()}, nil
	})
}

func (m *widgets) list(w http.ResponseWriter, r *http.Request) {
	p := auth.FromContext(r.Context())
	q, err := httpx.Query(r, "limit", "cursor", "name_prefix")
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	limit, err := httpx.Limit(q)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	prefix, ok := q["name_prefix"]
	if ok && !httpx.ValidName(prefix, 128) {
		httpx.WriteError(w, r, httpx.Errorf(httpx.CodeInvalidArgument, "query parameter \"name_prefix\" must be a valid name"))
		return
	}
	binding := "test-widgets|" + p.CredentialID + "|" + p.NamespaceID + "|name_prefix=" + prefix
	var after *httpx.Cursor
	if c, ok := q["cursor"]; ok {
		pos, err := httpx.DecodeCursor(c, binding)
		if err != nil {
			httpx.WriteError(w, r, err)
			return
		}
		after = &pos
	}
	rows, err := widgetList(r.Context(), m.db, p.CredentialID, prefix, after, limit+1)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	page := widgetPage{Items: []widgetView{}}
	for i := range rows[:min(limit, len(rows))] {
		page.Items = append(page.Items, rows[i].view())
	}
	if len(rows) > limit {
		last := rows[limit-1]
		page.NextCursor = httpx.EncodeCursor(binding, httpx.Cursor{CreatedAt: last.CreatedAt, ID: last.ID})
	}
	httpx.WriteData(w, r, http.StatusOK, page)
}

func (m *widgets) get(w http.ResponseWriter, r *http.Request) {
	p := auth.FromContext(r.Context())
	if _, err := httpx.Query(r); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	id := mux.Vars(r)["id"]
	if !httpx.ValidID(id) {
		httpx.WriteError(w, r, httpx.Errorf(httpx.CodeInvalidArgument, "widget id must be 32 lowercase hex characters"))
		return
	}
	wd, err := widgetGet(r.Context(), m.db, p.CredentialID, id)
	if errors.Is(err, sql.ErrNoRows) {
		err = auth.ErrNotFound("widget")
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	httpx.WriteData(w, r, http.StatusOK, widgetReceipt{Widget: wd.view()})
}

func (m *widgets) slow(w http.ResponseWriter, r *http.Request) {
	p := auth.FromContext(r.Context())
	id := mux.Vars(r)["id"]
	if !httpx.ValidID(id) {
		httpx.WriteError(w, r, httpx.Errorf(httpx.CodeInvalidArgument, "widget id must be 32 lowercase hex characters"))
		return
	}
	var req struct{}
	raw, err := readBody(r, &req)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	idem.Handle(w, r, m.db, p.CredentialID, raw, func(ctx context.Context, tx *sql.Tx) (int, any, error) {
		res, err := tx.ExecContext(ctx, `UPDATE test_widgets SET counter = counter + 1 WHERE credential_id = ? AND id = ?`, p.CredentialID, id)
		if err != nil {
			return 0, nil, err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return 0, nil, errors.Join(err, auth.ErrNotFound("widget"))
		}
		wd, err := widgetGet(ctx, tx, p.CredentialID, id)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, widgetReceipt{Widget: wd.view()}, nil
	})
}

func (m *widgets) queue(w http.ResponseWriter, r *http.Request) {
	p := auth.FromContext(r.Context())
	if _, err := httpx.Query(r); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	id := mux.Vars(r)["id"]
	if !httpx.ValidID(id) {
		httpx.WriteError(w, r, httpx.Errorf(httpx.CodeInvalidArgument, "queue id must be 32 lowercase hex characters"))
		return
	}
	if !p.HasQueue(id) {
		httpx.WriteError(w, r, auth.ErrNotFound("queue"))
		return
	}
	var name string
	err := m.db.QueryRowContext(r.Context(), `SELECT name FROM queues WHERE id = ? AND namespace_id = ?`, id, p.NamespaceID).Scan(&name)
	if errors.Is(err, sql.ErrNoRows) {
		err = auth.ErrNotFound("queue")
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	httpx.WriteData(w, r, http.StatusOK, map[string]string{"id": id, "name": name})
}

// plainCause is the cause of the unclassified error of /v1/test-errors/plain;
// it must reach the log and never the client.
const plainCause = "testwidgets: store: connection to 10.0.0.7 refused"

func (m *widgets) fail(w http.ResponseWriter, r *http.Request) {
	switch kind := mux.Vars(r)["kind"]; kind {
	case "plain":
		httpx.WriteError(w, r, errors.New(plainCause))
	case "panic":
		panic("testwidgets: " + plainCause)
	default:
		httpx.WriteError(w, r, httpx.Errorf(httpx.Code(kind), "test error %s", kind))
	}
}

// ---- helpers ----------------------------------------------------------------

// allTaskPermissions are the permissions the testwidgets API uses.
var allTaskPermissions = []string{auth.PermTasksSubmit, auth.PermTasksRead}

// setup starts a server on a fresh database and returns it with a
// credential holding tasks:submit and tasks:read.
func setup(t *testing.T, opts ...servertest.Option) (*servertest.Server, servertest.Credential) {
	t.Helper()
	srv := servertest.Start(t, opts...)
	return srv, srv.Credential(t, servertest.CredentialParams{Permissions: allTaskPermissions})
}

// rawRequest is an HTTP call whose headers are sent exactly as given.
type rawRequest struct {
	method, path string
	header       http.Header
	body         io.Reader
}

// send performs req and decodes the envelope. It does not touch t, so it may
// run in any goroutine.
func send(srv *servertest.Server, req rawRequest) (*servertest.Response, error) {
	hr, err := http.NewRequest(req.method, srv.URL+req.path, req.body)
	if err != nil {
		return nil, err
	}
	if req.header != nil {
		hr.Header = req.header.Clone()
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := &servertest.Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}
	if err := json.Unmarshal(raw, out); err != nil {
		return nil, fmt.Errorf("%s %s: reply is not an envelope: %v: %s", req.method, req.path, err, raw)
	}
	return out, nil
}

func mustSend(t *testing.T, srv *servertest.Server, req rawRequest) *servertest.Response {
	t.Helper()
	resp, err := send(srv, req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// writeHeader returns the headers of a JSON write.
func writeHeader(token, key string) http.Header {
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	h.Set("Content-Type", "application/json")
	if key != "" {
		h.Set("Idempotency-Key", key)
	}
	return h
}

// checkEnvelope checks the C-6 headers and body of resp.
func checkEnvelope(t *testing.T, resp *servertest.Response) {
	t.Helper()
	id := resp.Header.Get("X-Request-ID")
	if len(id) != 32 || !httpx.ValidID(id) {
		t.Errorf("X-Request-ID = %q, want 32 lowercase hex characters", id)
	}
	if got := resp.Header.Values("Cache-Control"); !slices.Equal(got, []string{"no-store"}) {
		t.Errorf("Cache-Control = %q, want no-store", got)
	}
	if got := resp.Header.Values("Content-Type"); !slices.Equal(got, []string{"application/json"}) {
		t.Errorf("Content-Type = %q, want application/json", got)
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(resp.Body, &members); err != nil {
		t.Fatalf("body %s: %v", resp.Body, err)
	}
	var keys []string
	for k := range members {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"data", "request_id"}) && !slices.Equal(keys, []string{"error", "request_id"}) {
		t.Errorf("envelope members %v, want request_id and exactly one of data, error: %s", keys, resp.Body)
	}
	if resp.RequestID != id {
		t.Errorf("request_id = %q, X-Request-ID = %q", resp.RequestID, id)
	}
	if resp.Error != nil {
		var e map[string]json.RawMessage
		if err := json.Unmarshal(members["error"], &e); err != nil || len(e) != 2 || resp.Error.Code == "" || resp.Error.Message == "" {
			t.Errorf("error %s: want exactly a non-empty code and message", members["error"])
		}
	}
}

// wantError checks that resp is an error envelope with status and code.
func wantError(t *testing.T, resp *servertest.Response, status int, code httpx.Code) {
	t.Helper()
	checkEnvelope(t, resp)
	if resp.Status != status || resp.Code() != string(code) {
		t.Fatalf("got %d %s, want %d %s: %s", resp.Status, resp.Code(), status, code, resp.Body)
	}
}

// wantData checks that resp succeeded with status and decodes its data.
func wantData(t *testing.T, resp *servertest.Response, status int, data any) {
	t.Helper()
	checkEnvelope(t, resp)
	if resp.Status != status || resp.Error != nil {
		t.Fatalf("got %d %s, want %d: %s", resp.Status, resp.Code(), status, resp.Body)
	}
	if data != nil {
		if err := json.Unmarshal(resp.Data, data); err != nil {
			t.Fatalf("data %s: %v", resp.Data, err)
		}
	}
}

// createdWidget is the decoded data of a widget write.
type createdWidget struct {
	Widget       widgetView `json:"widget"`
	Deduplicated bool       `json:"deduplicated"`
}

// createWidget creates a widget named name and returns it.
func createWidget(t *testing.T, srv *servertest.Server, token, name string) widgetView {
	t.Helper()
	resp := srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/test-widgets", Token: token,
		IdempotencyKey: "create-" + name + "-" + db.NewID(), Body: fmt.Sprintf(`{"name":%q}`, name)})
	var got createdWidget
	wantData(t, resp, http.StatusCreated, &got)
	return got.Widget
}

// countWidgets returns how many widgets the credential has, read from the
// database.
func countWidgets(t *testing.T, srv *servertest.Server, credentialID string) int {
	t.Helper()
	var n int
	if err := srv.DB.QueryRow(`SELECT COUNT(*) FROM test_widgets WHERE credential_id = ?`, credentialID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// counterOf returns the committed counter of a widget.
func counterOf(t *testing.T, srv *servertest.Server, id string) uint64 {
	t.Helper()
	var n uint64
	if err := srv.DB.QueryRow(`SELECT counter FROM test_widgets WHERE id = ?`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func revoke(t *testing.T, srv *servertest.Server, credentialID string) {
	t.Helper()
	if err := admin.NewStore(srv.DB).CredentialRevoke(context.Background(), credentialID, "test"); err != nil {
		t.Fatal(err)
	}
}

// ---- C-1 … C-4: authentication and scope ------------------------------------
