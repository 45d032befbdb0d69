package server_test

// Deadline, idempotency and pagination (C-12 … C-16) and the health
// endpoints, end to end.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orbitrun/orbit/config"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/modules"
)

func TestC12_Deadline(t *testing.T) {
	t.Parallel()
	const deadline = 750 * time.Millisecond
	srv, cred := setup(t, func(cfg *config.Config, _ modules.Instances) { cfg.Server.RequestDeadline = deadline })
	w := createWidget(t, srv, cred.Token, "locked")
	ctx := context.Background()

	// Another transaction holds the widget's row lock, so the write blocks
	// until the deadline ends it.
	holder, err := srv.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	var id string
	if err := holder.QueryRowContext(ctx, `SELECT id FROM test_widgets WHERE id = ? FOR UPDATE`, w.ID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp := srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/test-widgets/" + w.ID + ":slow", Token: cred.Token,
		IdempotencyKey: "c12-slow", Body: `{}`})
	elapsed := time.Since(start)
	if err := holder.Rollback(); err != nil {
		t.Fatal(err)
	}
	wantError(t, resp, http.StatusServiceUnavailable, httpx.CodeUnavailable)
	if elapsed < deadline || elapsed > deadline+5*time.Second {
		t.Errorf("the request took %s, want just over the %s deadline", elapsed, deadline)
	}
	if !strings.Contains(resp.Error.Message, "deadline") {
		t.Errorf("message %q does not say what happened", resp.Error.Message)
	}

	// Neither the change nor its idempotency record was committed.
	if got := counterOf(t, srv, w.ID); got != 0 {
		t.Fatalf("the write of the timed-out request is visible: counter %d", got)
	}
	var records int
	if err := srv.DB.QueryRow(`SELECT COUNT(*) FROM idempotency_records WHERE credential_id = ? AND idem_key = 'c12-slow'`, cred.CredentialID).Scan(&records); err != nil {
		t.Fatal(err)
	}
	if records != 0 {
		t.Fatal("the idempotency record of the timed-out request was committed")
	}

	// So the same key is evaluated afresh once the lock is free.
	retry := srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/test-widgets/" + w.ID + ":slow", Token: cred.Token,
		IdempotencyKey: "c12-slow", Body: `{}`})
	var got createdWidget
	wantData(t, retry, http.StatusOK, &got)
	if got.Deduplicated || got.Widget.Count != 1 {
		t.Fatalf("retry = %s, want a fresh change to count 1", retry.Data)
	}
}

// ---- C-13 … C-15: idempotency -----------------------------------------------

func TestC13_IdempotencyKeyRequired(t *testing.T) {
	t.Parallel()
	srv, cred := setup(t)
	w := createWidget(t, srv, cred.Token, "target")
	tests := []struct {
		name string
		keys []string
	}{
		{name: "Missing"},
		{name: "Empty", keys: []string{""}},
		{name: "TooLong", keys: []string{strings.Repeat("k", 129)}},
		{name: "Space", keys: []string{"a b"}},
		{name: "Slash", keys: []string{"a/b"}},
		{name: "Plus", keys: []string{"a+b"}},
		{name: "NonASCII", keys: []string{"schlüssel"}},
		{name: "Repeated", keys: []string{"k1", "k1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for path, body := range map[string]string{
				"/v1/test-widgets":                   `{"name":"keyless"}`,
				"/v1/test-widgets/" + w.ID + ":slow": `{}`,
			} {
				h := writeHeader(cred.Token, "")
				if tt.keys != nil {
					h["Idempotency-Key"] = tt.keys
				}
				resp := mustSend(t, srv, rawRequest{method: http.MethodPost, path: path, header: h, body: strings.NewReader(body)})
				wantError(t, resp, http.StatusBadRequest, httpx.CodeInvalidArgument)
				if !strings.Contains(resp.Error.Message, "Idempotency-Key") {
					t.Errorf("message %q does not name the header", resp.Error.Message)
				}
				if tt.keys != nil && tt.keys[0] != "" && strings.Contains(string(resp.Body), tt.keys[0]) {
					t.Errorf("the reply repeats the key: %s", resp.Body)
				}
			}
		})
	}
	t.Run("LongestKeyOfEveryCharacter", func(t *testing.T) {
		t.Parallel()
		alphabet := "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-:"
		key := (alphabet + strings.Repeat("z", 128))[:128]
		resp := srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/test-widgets", Token: cred.Token,
			IdempotencyKey: key, Body: `{"name":"keyed"}`})
		wantData(t, resp, http.StatusCreated, nil)
	})
	t.Run("NothingWithoutKeyWasWritten", func(t *testing.T) {
		t.Parallel()
		var n int
		if err := srv.DB.QueryRow(`SELECT COUNT(*) FROM test_widgets WHERE name = 'keyless'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 || counterOf(t, srv, w.ID) != 0 {
			t.Fatalf("writes without a valid key changed state: %d widgets, counter %d", n, counterOf(t, srv, w.ID))
		}
	})
}

func TestC14_IdempotentReceipts(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	newCred := func() servertest.Credential {
		return srv.Credential(t, servertest.CredentialParams{Permissions: allTaskPermissions})
	}
	post := func(token, path, key, body string) *servertest.Response {
		return srv.Do(t, servertest.Request{Method: http.MethodPost, Path: path, Token: token, IdempotencyKey: key, Body: body})
	}

	t.Run("SameContentReplaysOriginalReceipt", func(t *testing.T) {
		t.Parallel()
		cred := newCred()
		first := post(cred.Token, "/v1/test-widgets", "k1", `{"name":"w1","count":"5","tags":{"a":"1","b":"2"}}`)
		var original createdWidget
		wantData(t, first, http.StatusCreated, &original)
		if original.Deduplicated {
			t.Fatal("first reply says deduplicated")
		}
		for i, body := range []string{
			`{"name":"w1","count":"5","tags":{"a":"1","b":"2"}}`,
			"{\n  \"tags\" : { \"b\":\"2\", \"a\":\"1\" },\t\"count\":\"5\",\r\n  \"name\":\"w1\"\n}",
			`{"name":"w\u0031","count":"5","tags":{"a":"1","b":"2"}}`,
		} {
			replay := post(cred.Token, "/v1/test-widgets", "k1", body)
			var got createdWidget
			wantData(t, replay, http.StatusOK, &got)
			if !got.Deduplicated {
				t.Errorf("replay %d: deduplicated is false", i)
			}
			if !bytes.Equal(widgetBytes(t, replay.Data), widgetBytes(t, first.Data)) {
				t.Errorf("replay %d: receipt %s, want the original %s", i, replay.Data, first.Data)
			}
			if replay.RequestID == first.RequestID {
				t.Errorf("replay %d kept the original request id", i)
			}
		}
		if n := countWidgets(t, srv, cred.CredentialID); n != 1 {
			t.Fatalf("%d widgets, want the change applied once", n)
		}
	})

	t.Run("OtherContentConflicts", func(t *testing.T) {
		t.Parallel()
		cred := newCred()
		wantData(t, post(cred.Token, "/v1/test-widgets", "k1", `{"name":"w1","count":"5"}`), http.StatusCreated, nil)
		for _, body := range []string{
			`{"name":"w2","count":"5"}`,
			`{"name":"w1","count":"6"}`,
			`{"name":"w1"}`,
			`{"name":"w1","count":"5","tags":{}}`,
		} {
			resp := post(cred.Token, "/v1/test-widgets", "k1", body)
			wantError(t, resp, http.StatusConflict, httpx.CodeIdempotencyConflict)
		}
		if n := countWidgets(t, srv, cred.CredentialID); n != 1 {
			t.Fatalf("%d widgets, want 1", n)
		}
	})

	t.Run("ConcurrentRequestsChangeOnce", func(t *testing.T) {
		t.Parallel()
		cred := newCred()
		const n = 16
		gate := make(chan struct{})
		replies := make([]*servertest.Response, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-gate
				replies[i], errs[i] = send(srv, rawRequest{method: http.MethodPost, path: "/v1/test-widgets",
					header: writeHeader(cred.Token, "race"), body: strings.NewReader(`{"name":"raced","count":"1"}`)})
			})
		}
		close(gate)
		wg.Wait()
		created := 0
		var receipt []byte
		for i, resp := range replies {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			var got createdWidget
			switch resp.Status {
			case http.StatusCreated:
				created++
				wantData(t, resp, http.StatusCreated, &got)
				if got.Deduplicated {
					t.Error("a 201 says deduplicated")
				}
			case http.StatusOK:
				wantData(t, resp, http.StatusOK, &got)
				if !got.Deduplicated {
					t.Error("a 200 does not say deduplicated")
				}
			default:
				t.Fatalf("reply %d: %d %s", i, resp.Status, resp.Body)
			}
			if receipt == nil {
				receipt = widgetBytes(t, resp.Data)
			} else if !bytes.Equal(widgetBytes(t, resp.Data), receipt) {
				t.Errorf("receipts differ: %s and %s", resp.Data, receipt)
			}
		}
		if created != 1 {
			t.Errorf("%d replies were 201, want exactly 1", created)
		}
		if got := countWidgets(t, srv, cred.CredentialID); got != 1 {
			t.Fatalf("%d widgets, want exactly one change", got)
		}
	})

	t.Run("KeyScopedToCredential", func(t *testing.T) {
		t.Parallel()
		a, b := newCred(), newCred()
		var fromA, fromB createdWidget
		wantData(t, post(a.Token, "/v1/test-widgets", "shared", `{"name":"w"}`), http.StatusCreated, &fromA)
		wantData(t, post(b.Token, "/v1/test-widgets", "shared", `{"name":"w"}`), http.StatusCreated, &fromB)
		if fromB.Deduplicated || fromA.Widget.ID == fromB.Widget.ID {
			t.Fatalf("the key of one credential deduplicated another's write: %+v %+v", fromA, fromB)
		}
		// Another credential's use of the key does not conflict either.
		wantData(t, post(b.Token, "/v1/test-widgets", "only-a", `{"name":"x"}`), http.StatusCreated, nil)
		wantData(t, post(a.Token, "/v1/test-widgets", "only-a", `{"name":"y"}`), http.StatusCreated, nil)
	})

	t.Run("KeyScopedToOperation", func(t *testing.T) {
		t.Parallel()
		cred := newCred()
		w1 := createWidget(t, srv, cred.Token, "one")
		w2 := createWidget(t, srv, cred.Token, "two")
		var bump createdWidget
		wantData(t, post(cred.Token, "/v1/test-widgets/"+w1.ID+":slow", "op", `{}`), http.StatusOK, &bump)
		if bump.Deduplicated || bump.Widget.Count != 1 {
			t.Fatalf("first bump %+v", bump)
		}
		wantData(t, post(cred.Token, "/v1/test-widgets/"+w2.ID+":slow", "op", `{}`), http.StatusOK, &bump)
		if bump.Deduplicated || bump.Widget.ID != w2.ID {
			t.Fatalf("the key of one widget's operation deduplicated another's: %+v", bump)
		}
		wantData(t, post(cred.Token, "/v1/test-widgets", "op", `{"name":"three"}`), http.StatusCreated, nil)
		wantData(t, post(cred.Token, "/v1/test-widgets/"+w1.ID+":slow", "op", `{}`), http.StatusOK, &bump)
		if !bump.Deduplicated || counterOf(t, srv, w1.ID) != 1 || counterOf(t, srv, w2.ID) != 1 {
			t.Fatalf("replay of the first bump: %+v, counters %d %d", bump, counterOf(t, srv, w1.ID), counterOf(t, srv, w2.ID))
		}
	})

	t.Run("FailedWriteStoresNothing", func(t *testing.T) {
		t.Parallel()
		cred := newCred()
		missing := db.NewID()
		wantError(t, post(cred.Token, "/v1/test-widgets/"+missing+":slow", "retry-me", `{}`), http.StatusNotFound, httpx.CodeNotFound)
		var records int
		if err := srv.DB.QueryRow(`SELECT COUNT(*) FROM idempotency_records WHERE credential_id = ?`, cred.CredentialID).Scan(&records); err != nil {
			t.Fatal(err)
		}
		if records != 0 {
			t.Fatalf("a failed write left %d idempotency records", records)
		}
		wantError(t, post(cred.Token, "/v1/test-widgets/"+missing+":slow", "retry-me", `{}`), http.StatusNotFound, httpx.CodeNotFound)
	})
}

// widgetBytes returns the "widget" member of a receipt as sent.
func widgetBytes(t *testing.T, data []byte) []byte {
	t.Helper()
	var r struct {
		Widget json.RawMessage `json:"widget"`
	}
	if err := json.Unmarshal(data, &r); err != nil || r.Widget == nil {
		t.Fatalf("receipt %s: %v", data, err)
	}
	return r.Widget
}

func TestC15_ReceiptIsWhatWasTrue(t *testing.T) {
	t.Parallel()
	srv, cred := setup(t)
	post := func(path, key, body string) *servertest.Response {
		return srv.Do(t, servertest.Request{Method: http.MethodPost, Path: path, Token: cred.Token, IdempotencyKey: key, Body: body})
	}
	var created createdWidget
	wantData(t, post("/v1/test-widgets", "c15", `{"name":"w","count":"10"}`), http.StatusCreated, &created)
	for i := 0; i < 2; i++ {
		wantData(t, post("/v1/test-widgets/"+created.Widget.ID+":slow", fmt.Sprintf("c15-bump-%d", i), `{}`), http.StatusOK, nil)
	}
	var replay createdWidget
	wantData(t, post("/v1/test-widgets", "c15", `{"name":"w","count":"10"}`), http.StatusOK, &replay)
	if replay.Widget.Count != 10 {
		t.Errorf("replayed receipt has count %d, want 10 as first returned", replay.Widget.Count)
	}
	var current createdWidget
	wantData(t, srv.Do(t, servertest.Request{Method: http.MethodGet, Path: "/v1/test-widgets/" + created.Widget.ID, Token: cred.Token}), http.StatusOK, &current)
	if current.Widget.Count != 12 {
		t.Errorf("query shows count %d, want the current 12", current.Widget.Count)
	}
}

// ---- C-16: pagination --------------------------------------------------------

func TestC16_Pagination(t *testing.T) {
	t.Parallel()
	srv, cred := setup(t)
	sibling := srv.Credential(t, servertest.CredentialParams{Permissions: allTaskPermissions})
	foreign := srv.Credential(t, servertest.CredentialParams{Namespace: "other", Permissions: allTaskPermissions})

	// 25 widgets of the credential; five share one created_at, so the id
	// decides their order. The sibling's widgets are interleaved in time.
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var all []widget
	for i := range 25 {
		at := base.Add(time.Duration(i) * time.Second)
		if i >= 10 && i < 15 {
			at = base.Add(10 * time.Second)
		}
		name := fmt.Sprintf("beta-%02d", i)
		if i%3 == 0 {
			name = fmt.Sprintf("alpha-%02d", i)
		}
		w := widget{ID: db.NewID(), CredentialID: cred.CredentialID, NamespaceID: cred.NamespaceID, Name: name, Tags: map[string]string{}, CreatedAt: at}
		all = append(all, w)
		other := widget{ID: db.NewID(), CredentialID: sibling.CredentialID, NamespaceID: sibling.NamespaceID, Name: name, Tags: map[string]string{}, CreatedAt: at}
		for _, row := range []*widget{&w, &other} {
			if err := widgetInsert(context.Background(), srv.DB, row); err != nil {
				t.Fatal(err)
			}
		}
	}
	slices.SortFunc(all, func(a, b widget) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	idsOf := func(ws []widget, prefix string) []string {
		var ids []string
		for _, w := range ws {
			if strings.HasPrefix(w.Name, prefix) {
				ids = append(ids, w.ID)
			}
		}
		return ids
	}
	list := func(c servertest.Credential, query string) *servertest.Response {
		return srv.Do(t, servertest.Request{Method: http.MethodGet, Path: "/v1/test-widgets" + query, Token: c.Token})
	}
	// walk pages through the list with the given filter and limit.
	walk := func(t *testing.T, filter string, limit int) []string {
		t.Helper()
		var ids []string
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > 30 {
				t.Fatal("pagination does not end")
			}
			q := fmt.Sprintf("?limit=%d%s", limit, filter)
			if cursor != "" {
				q += "&cursor=" + cursor
			}
			var page widgetPage
			wantData(t, list(cred, q), http.StatusOK, &page)
			if len(page.Items) > limit {
				t.Fatalf("page of %d items with limit %d", len(page.Items), limit)
			}
			for _, item := range page.Items {
				ids = append(ids, item.ID)
			}
			if page.NextCursor == "" {
				return ids
			}
			if len(page.Items) != limit {
				t.Fatalf("a page of %d items with limit %d has a next_cursor", len(page.Items), limit)
			}
			cursor = page.NextCursor
		}
	}

	t.Run("NewestFirstEveryItemOnce", func(t *testing.T) {
		t.Parallel()
		for _, limit := range []int{1, 2, 7, 25, 100} {
			if got, want := walk(t, "", limit), idsOf(all, ""); !slices.Equal(got, want) {
				t.Errorf("limit %d: walked\n %v\nwant\n %v", limit, got, want)
			}
		}
	})

	t.Run("Filtered", func(t *testing.T) {
		t.Parallel()
		if got, want := walk(t, "&name_prefix=alpha", 3), idsOf(all, "alpha"); !slices.Equal(got, want) {
			t.Errorf("walked %v, want %v", got, want)
		}
	})

	t.Run("DefaultLimit", func(t *testing.T) {
		t.Parallel()
		var page widgetPage
		wantData(t, list(cred, ""), http.StatusOK, &page)
		if len(page.Items) != 20 || page.NextCursor == "" {
			t.Fatalf("default page: %d items, next_cursor %q; want 20 and a cursor", len(page.Items), page.NextCursor)
		}
	})

	t.Run("LastPageHasNoCursor", func(t *testing.T) {
		t.Parallel()
		resp := list(cred, "?limit=25")
		var members map[string]json.RawMessage
		wantData(t, resp, http.StatusOK, &members)
		if _, ok := members["next_cursor"]; ok {
			t.Fatalf("a complete page has next_cursor: %s", resp.Data)
		}
	})

	t.Run("LimitBounds", func(t *testing.T) {
		t.Parallel()
		for _, bad := range []string{"0", "101", "-1", "01", "1.5", "1e1", "abc", "+5", "18446744073709551617"} {
			wantError(t, list(cred, "?limit="+bad), http.StatusBadRequest, httpx.CodeInvalidArgument)
		}
		for _, good := range []string{"1", "100"} {
			wantData(t, list(cred, "?limit="+good), http.StatusOK, nil)
		}
	})

	t.Run("CursorBoundToList", func(t *testing.T) {
		t.Parallel()
		var plain, filtered widgetPage
		wantData(t, list(cred, "?limit=2"), http.StatusOK, &plain)
		wantData(t, list(cred, "?limit=2&name_prefix=alpha"), http.StatusOK, &filtered)
		if plain.NextCursor == "" || filtered.NextCursor == "" {
			t.Fatal("no cursors to reuse")
		}
		tests := []struct {
			name  string
			cred  servertest.Credential
			query string
		}{
			{"OtherFilter", cred, "?limit=2&name_prefix=alpha&cursor=" + plain.NextCursor},
			{"OtherFilterValue", cred, "?limit=2&name_prefix=alph&cursor=" + filtered.NextCursor},
			{"FilterDropped", cred, "?limit=2&cursor=" + filtered.NextCursor},
			{"OtherCredential", sibling, "?limit=2&cursor=" + plain.NextCursor},
			{"OtherNamespace", foreign, "?limit=2&cursor=" + plain.NextCursor},
			{"Malformed", cred, "?cursor=not-a-cursor"},
			{"Padded", cred, "?cursor=" + plain.NextCursor + "%3D"},
			{"Truncated", cred, "?cursor=" + plain.NextCursor[:len(plain.NextCursor)-2]},
			{"Tampered", cred, "?cursor=" + flipChar(plain.NextCursor, 3)},
		}
		for _, tt := range tests {
			resp := list(tt.cred, tt.query)
			checkEnvelope(t, resp)
			if resp.Status != http.StatusBadRequest || resp.Code() != string(httpx.CodeInvalidArgument) {
				t.Errorf("%s: %d %s, want 400 INVALID_ARGUMENT", tt.name, resp.Status, resp.Body)
			}
		}
		// With everything the same, the cursor works; limit is not part of
		// what shapes the list.
		wantData(t, list(cred, "?limit=5&cursor="+plain.NextCursor), http.StatusOK, nil)
		wantData(t, list(cred, "?name_prefix=alpha&cursor="+filtered.NextCursor), http.StatusOK, nil)
	})
}

// flipChar changes the base64url character at i to another one.
func flipChar(s string, i int) string {
	c := byte('A')
	if s[i] == 'A' {
		c = 'B'
	}
	return s[:i] + string(c) + s[i+1:]
}

// ---- health --------------------------------------------------------------------

func TestHealth(t *testing.T) {
	t.Parallel()
	get := func(srv *servertest.Server, path string) *servertest.Response {
		return srv.Do(t, servertest.Request{Method: http.MethodGet, Path: path})
	}
	var status struct {
		Status string `json:"status"`
	}

	t.Run("Ready", func(t *testing.T) {
		t.Parallel()
		srv := servertest.Start(t)
		wantData(t, get(srv, "/healthz"), http.StatusOK, &status)
		if status.Status != "ok" {
			t.Errorf("healthz status %q", status.Status)
		}
		wantData(t, get(srv, "/readyz"), http.StatusOK, &status)
		if status.Status != "ready" {
			t.Errorf("readyz status %q", status.Status)
		}
	})

	t.Run("SchemaBehind", func(t *testing.T) {
		t.Parallel()
		srv := servertest.Start(t)
		var last int
		if err := srv.DB.QueryRow(`SELECT MAX(version) FROM schema_migrations`).Scan(&last); err != nil {
			t.Fatal(err)
		}
		if _, err := srv.DB.Exec(`DELETE FROM schema_migrations WHERE version = ?`, last); err != nil {
			t.Fatal(err)
		}
		resp := get(srv, "/readyz")
		wantError(t, resp, http.StatusServiceUnavailable, httpx.CodeUnavailable)
		if !strings.Contains(resp.Error.Message, "schema") {
			t.Errorf("message %q does not name the schema", resp.Error.Message)
		}
		wantData(t, get(srv, "/healthz"), http.StatusOK, nil)
	})

	t.Run("DatabaseUnreachable", func(t *testing.T) {
		t.Parallel()
		srv := servertest.Start(t)
		srv.DB.Close()
		wantError(t, get(srv, "/readyz"), http.StatusServiceUnavailable, httpx.CodeUnavailable)
		wantData(t, get(srv, "/healthz"), http.StatusOK, nil)
	})
}
