package server_test

// The envelope, error codes and strict input (C-6 … C-11), end to end.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
)

func TestC6_Envelope(t *testing.T) {
	t.Parallel()
	srv, cred := setup(t)
	bearer := http.Header{"Authorization": {"Bearer " + cred.Token}}
	powerless := srv.Credential(t, servertest.CredentialParams{})
	tests := []struct {
		name   string
		req    rawRequest
		status int
		code   httpx.Code
		allow  string
	}{
		{name: "Read", req: rawRequest{method: http.MethodGet, path: "/v1/credential", header: bearer}, status: http.StatusOK},
		{name: "Write", req: rawRequest{method: http.MethodPost, path: "/v1/test-widgets", header: writeHeader(cred.Token, "c6-write"), body: strings.NewReader(`{"name":"w"}`)}, status: http.StatusCreated},
		{name: "List", req: rawRequest{method: http.MethodGet, path: "/v1/test-widgets?limit=1", header: bearer}, status: http.StatusOK},
		{name: "Health", req: rawRequest{method: http.MethodGet, path: "/healthz"}, status: http.StatusOK},
		{name: "Unauthenticated", req: rawRequest{method: http.MethodGet, path: "/v1/credential"}, status: http.StatusUnauthorized, code: httpx.CodeUnauthenticated},
		{name: "Forbidden", req: rawRequest{method: http.MethodGet, path: "/v1/test-widgets", header: http.Header{"Authorization": {"Bearer " + powerless.Token}}}, status: http.StatusForbidden, code: httpx.CodePermissionDenied},
		{name: "InvalidArgument", req: rawRequest{method: http.MethodGet, path: "/v1/test-widgets?limit=0", header: bearer}, status: http.StatusBadRequest, code: httpx.CodeInvalidArgument},
		{name: "UnknownRoute", req: rawRequest{method: http.MethodGet, path: "/v1/nowhere", header: bearer}, status: http.StatusNotFound, code: httpx.CodeNotFound},
		{name: "UnknownRouteWithoutToken", req: rawRequest{method: http.MethodPost, path: "/v2/tasks"}, status: http.StatusNotFound, code: httpx.CodeNotFound},
		{name: "Root", req: rawRequest{method: http.MethodGet, path: "/"}, status: http.StatusNotFound, code: httpx.CodeNotFound},
		{name: "WrongMethod", req: rawRequest{method: http.MethodDelete, path: "/v1/credential", header: bearer}, status: http.StatusMethodNotAllowed, code: httpx.CodeMethodNotAllowed, allow: "GET"},
		{name: "WrongMethodOnList", req: rawRequest{method: http.MethodPut, path: "/v1/test-widgets", header: bearer}, status: http.StatusMethodNotAllowed, code: httpx.CodeMethodNotAllowed, allow: "GET, POST"},
		{name: "Panic", req: rawRequest{method: http.MethodGet, path: "/v1/test-errors/panic", header: bearer}, status: http.StatusInternalServerError, code: httpx.CodeInternal},
	}
	var mu sync.Mutex
	ids := map[string]string{}
	t.Run("Replies", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				resp := mustSend(t, srv, tt.req)
				if tt.code == "" {
					wantData(t, resp, tt.status, nil)
				} else {
					wantError(t, resp, tt.status, tt.code)
				}
				if tt.allow != "" {
					if got := resp.Header.Get("Allow"); got != tt.allow {
						t.Errorf("Allow = %q, want %q", got, tt.allow)
					}
				}
				mu.Lock()
				defer mu.Unlock()
				if other, dup := ids[resp.RequestID]; dup {
					t.Errorf("request id %s given to %s and %s", resp.RequestID, other, tt.name)
				}
				ids[resp.RequestID] = tt.name
			})
		}
	})
	// Every request id appears in the access log, which is how an operator
	// finds a request a client reports.
	logs := srv.Logs()
	for id, name := range ids {
		if !strings.Contains(logs, "request_id="+id) {
			t.Errorf("request id of %s is not in the log", name)
		}
	}
}

func TestC7_ErrorCodes(t *testing.T) {
	t.Parallel()
	srv, cred := setup(t)
	tests := []struct {
		code   httpx.Code
		status int
	}{
		{httpx.CodeInvalidArgument, 400},
		{httpx.CodeUnauthenticated, 401},
		{httpx.CodePermissionDenied, 403},
		{httpx.CodeNotFound, 404},
		{httpx.CodeStateConflict, 409},
		{httpx.CodeIdempotencyConflict, 409},
		{httpx.CodeSubscriptionLimit, 409},
		{httpx.CodeEventHistoryExpired, 410},
		{httpx.CodeProtocolRequired, 426},
		{httpx.CodeCapacityExceeded, 429},
		{httpx.CodeUnavailable, 503},
		{httpx.CodeInternal, 500},
	}
	for _, tt := range tests {
		t.Run(string(tt.code), func(t *testing.T) {
			t.Parallel()
			resp := srv.Do(t, servertest.Request{Method: http.MethodGet, Path: "/v1/test-errors/" + string(tt.code), Token: cred.Token})
			wantError(t, resp, tt.status, tt.code)
			if resp.Error.Message != "test error "+string(tt.code) {
				t.Errorf("message %q was not passed through", resp.Error.Message)
			}
			// Temporary refusals say when to retry; no other does.
			retry := resp.Header.Get("Retry-After")
			temporary := tt.code == httpx.CodeCapacityExceeded || tt.code == httpx.CodeUnavailable
			if temporary && retry != "1" {
				t.Errorf("Retry-After = %q, want 1", retry)
			}
			if !temporary && retry != "" {
				t.Errorf("Retry-After = %q on %s", retry, tt.code)
			}
		})
	}

	t.Run("UnclassifiedErrorIsInternal", func(t *testing.T) {
		t.Parallel()
		resp := srv.Do(t, servertest.Request{Method: http.MethodGet, Path: "/v1/test-errors/plain", Token: cred.Token})
		wantError(t, resp, http.StatusInternalServerError, httpx.CodeInternal)
		if resp.Error.Message != "internal error" || strings.Contains(string(resp.Body), "10.0.0.7") {
			t.Errorf("the cause reached the client: %s", resp.Body)
		}
		// The cause is logged with the request id, for the operator.
		found := false
		for line := range strings.Lines(srv.Logs()) {
			found = found || (strings.Contains(line, "request_id="+resp.RequestID) && strings.Contains(line, plainCause))
		}
		if !found {
			t.Errorf("no log line has both the request id and the cause:\n%s", srv.Logs())
		}
	})

	t.Run("UnknownCodeIsInternal", func(t *testing.T) {
		t.Parallel()
		resp := srv.Do(t, servertest.Request{Method: http.MethodGet, Path: "/v1/test-errors/NOT_A_CODE", Token: cred.Token})
		if resp.Status != http.StatusInternalServerError {
			t.Errorf("status %d for an unknown code, want 500", resp.Status)
		}
	})
}

// ---- C-8 … C-11: strict input ------------------------------------------------

func TestC8_StrictJSON(t *testing.T) {
	t.Parallel()
	srv, cred := setup(t)
	const secret = "SECRETVALUE"
	tooLarge := `{"name":"big","tags":{"k":"` + strings.Repeat("x", httpx.MaxBodyBytes) + `"}}`
	tests := []struct {
		name        string
		body        string
		contentType []string // default application/json
		chunked     bool
		mention     string // the message must contain it
	}{
		{name: "UnknownField", body: `{"name":"w","colour":"` + secret + `"}`, mention: "colour"},
		{name: "FieldInOtherCase", body: `{"Name":"w"}`, mention: "Name"},
		{name: "FieldInOtherCaseBesideExact", body: `{"name":"w","NAME":"` + secret + `"}`, mention: "NAME"},
		{name: "DuplicateKey", body: `{"name":"w","name":"` + secret + `"}`, mention: "name"},
		{name: "DuplicateKeyEscaped", body: `{"name":"w","n\u0061me":"` + secret + `"}`, mention: "name"},
		{name: "DuplicateKeyNested", body: `{"name":"w","tags":{"x":"1","x":"` + secret + `"}}`, mention: "tags.x"},
		{name: "TrailingObject", body: `{"name":"w"}{"name":"v"}`},
		{name: "TrailingGarbage", body: `{"name":"w"} ` + secret},
		{name: "InvalidUTF8InValue", body: "{\"name\":\"w\",\"tags\":{\"k\":\"\xff\xfe\"}}", mention: "UTF-8"},
		{name: "InvalidUTF8InKey", body: "{\"name\":\"w\",\"tags\":{\"\xc3\":\"v\"}}", mention: "UTF-8"},
		{name: "WrongTypeString", body: `{"name":5}`, mention: "name"},
		{name: "WrongTypeObject", body: `{"name":"w","tags":["` + secret + `"]}`, mention: "tags"},
		{name: "WrongTypeNested", body: `{"name":"w","tags":{"k":true}}`, mention: "tags.k"},
		{name: "MissingRequiredField", body: `{"tags":{}}`, mention: "name"},
		{name: "NullRequiredField", body: `{"name":null}`, mention: "name"},
		{name: "NotAnObject", body: `["w"]`},
		{name: "Truncated", body: `{"name":"w"`},
		{name: "Empty", body: ``},
		{name: "TooLarge", body: tooLarge, mention: "524288"},
		{name: "TooLargeChunked", body: tooLarge, chunked: true, mention: "524288"},
		{name: "NoContentType", body: `{"name":"w"}`, contentType: []string{}, mention: "Content-Type"},
		{name: "TextPlain", body: `{"name":"w"}`, contentType: []string{"text/plain"}, mention: "Content-Type"},
		{name: "OtherCharset", body: `{"name":"w"}`, contentType: []string{"application/json; charset=latin1"}, mention: "Content-Type"},
		{name: "OtherJSONType", body: `{"name":"w"}`, contentType: []string{"application/merge-patch+json"}, mention: "Content-Type"},
		{name: "TwoContentTypes", body: `{"name":"w"}`, contentType: []string{"application/json", "application/json"}, mention: "Content-Type"},
	}
	t.Run("Rejected", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				h := writeHeader(cred.Token, "c8-"+tt.name)
				if tt.contentType != nil {
					h["Content-Type"] = tt.contentType
				}
				var body io.Reader = strings.NewReader(tt.body)
				if tt.chunked {
					body = io.MultiReader(body) // hides the length: sent chunked
				}
				resp := mustSend(t, srv, rawRequest{method: http.MethodPost, path: "/v1/test-widgets", header: h, body: body})
				wantError(t, resp, http.StatusBadRequest, httpx.CodeInvalidArgument)
				if !strings.Contains(resp.Error.Message, tt.mention) {
					t.Errorf("message %q does not mention %q", resp.Error.Message, tt.mention)
				}
				if strings.Contains(string(resp.Body), secret) {
					t.Errorf("the reply repeats a value of the request: %s", resp.Body)
				}
			})
		}
	})
	if n := countWidgets(t, srv, cred.CredentialID); n != 0 {
		t.Fatalf("rejected requests created %d widgets", n)
	}

	t.Run("Accepted", func(t *testing.T) {
		for i, tt := range []struct{ name, body, contentType string }{
			{name: "CharsetUTF8", body: `{"name":"w1"}`, contentType: "application/json; charset=utf-8"},
			{name: "CharsetUpperCase", body: `{"name":"w2"}`, contentType: "application/json; charset=UTF-8"},
			{name: "EscapedUnicode", body: `{"name":"w3","tags":{"note":"caf\u00e9 \ud83d\ude00"}}`, contentType: "application/json"},
			{name: "ExactlyAtLimit", body: `{"name":"w4"` + strings.Repeat(" ", httpx.MaxBodyBytes-len(`{"name":"w4"}`)) + `}`, contentType: "application/json"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				if tt.name == "ExactlyAtLimit" && len(tt.body) != httpx.MaxBodyBytes {
					t.Fatalf("body has %d bytes", len(tt.body))
				}
				resp := srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/test-widgets", Token: cred.Token,
					IdempotencyKey: fmt.Sprintf("c8-ok-%d", i), Body: tt.body, ContentType: tt.contentType})
				var got createdWidget
				wantData(t, resp, http.StatusCreated, &got)
				if tt.name == "EscapedUnicode" && got.Widget.Tags["note"] != "café 😀" {
					t.Errorf("tags = %q", got.Widget.Tags)
				}
			})
		}
	})
}

func TestC9_StrictQuery(t *testing.T) {
	t.Parallel()
	srv, cred := setup(t)
	w := createWidget(t, srv, cred.Token, "alpha")
	tests := []struct {
		name, method, path string
		ok                 bool
	}{
		{name: "UnknownParameter", method: http.MethodGet, path: "/v1/test-widgets?colour=red"},
		{name: "ParameterInOtherCase", method: http.MethodGet, path: "/v1/test-widgets?Limit=5"},
		{name: "RepeatedParameter", method: http.MethodGet, path: "/v1/test-widgets?limit=1&limit=1"},
		{name: "EmptyValue", method: http.MethodGet, path: "/v1/test-widgets?name_prefix="},
		{name: "NameWithoutValue", method: http.MethodGet, path: "/v1/test-widgets?name_prefix"},
		{name: "MalformedEscape", method: http.MethodGet, path: "/v1/test-widgets?limit=%zz"},
		{name: "UnknownBesideKnown", method: http.MethodGet, path: "/v1/test-widgets?limit=5&name_prefix=a&x=1"},
		{name: "WriteTakesNone", method: http.MethodPost, path: "/v1/test-widgets?limit=1"},
		{name: "ItemTakesNone", method: http.MethodGet, path: "/v1/test-widgets/" + w.ID + "?verbose=1"},
		{name: "CredentialTakesNone", method: http.MethodGet, path: "/v1/credential?verbose=1"},
		{name: "HealthzTakesNone", method: http.MethodGet, path: "/healthz?verbose=1"},
		{name: "ReadyzTakesNone", method: http.MethodGet, path: "/readyz?verbose=1"},
		{name: "Known", method: http.MethodGet, path: "/v1/test-widgets?limit=5&name_prefix=al", ok: true},
		{name: "KnownEscaped", method: http.MethodGet, path: "/v1/test-widgets?%6Cimit=5", ok: true},
		{name: "None", method: http.MethodGet, path: "/v1/test-widgets", ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := rawRequest{method: tt.method, path: tt.path, header: writeHeader(cred.Token, "c9-"+tt.name)}
			if tt.method == http.MethodPost {
				req.body = strings.NewReader(`{"name":"q"}`)
			}
			resp := mustSend(t, srv, req)
			if tt.ok {
				wantData(t, resp, http.StatusOK, nil)
				return
			}
			wantError(t, resp, http.StatusBadRequest, httpx.CodeInvalidArgument)
		})
	}
	t.Run("FilterApplies", func(t *testing.T) {
		t.Parallel()
		var page widgetPage
		wantData(t, srv.Do(t, servertest.Request{Method: http.MethodGet, Path: "/v1/test-widgets?name_prefix=zz", Token: cred.Token}), http.StatusOK, &page)
		if len(page.Items) != 0 {
			t.Errorf("name_prefix=zz returned %d widgets", len(page.Items))
		}
	})
}

func TestC10_CanonicalUint64(t *testing.T) {
	t.Parallel()
	srv, cred := setup(t)
	accepted := []struct{ name, count, want string }{
		{name: "Zero", count: `"0"`, want: "0"},
		{name: "One", count: `"1"`, want: "1"},
		{name: "Large", count: `"9007199254740993"`, want: "9007199254740993"}, // not exact as a float64
		{name: "Max", count: `"18446744073709551615"`, want: "18446744073709551615"},
		{name: "Absent", want: "0"},
	}
	for _, tt := range accepted {
		t.Run("Accepts"+tt.name, func(t *testing.T) {
			t.Parallel()
			body := `{"name":"n"}`
			if tt.count != "" {
				body = `{"name":"n","count":` + tt.count + `}`
			}
			resp := srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/test-widgets", Token: cred.Token,
				IdempotencyKey: "c10-" + tt.name, Body: body})
			var got createdWidget
			wantData(t, resp, http.StatusCreated, &got)
			if !strings.Contains(string(resp.Data), `"count":"`+tt.want+`"`) {
				t.Fatalf("count is not the canonical string %q: %s", tt.want, resp.Data)
			}
			// Read back through the list: it survived the database intact.
			var page widgetPage
			wantData(t, srv.Do(t, servertest.Request{Method: http.MethodGet, Path: "/v1/test-widgets?limit=100", Token: cred.Token}), http.StatusOK, &page)
			for _, item := range page.Items {
				if item.ID == got.Widget.ID && fmt.Sprint(uint64(item.Count)) != tt.want {
					t.Fatalf("listed count %d, want %s", item.Count, tt.want)
				}
			}
		})
	}
	rejected := []struct{ name, count string }{
		{"Number", `5`},
		{"NumberZero", `0`},
		{"Negative", `"-1"`},
		{"Plus", `"+1"`},
		{"LeadingZero", `"01"`},
		{"Zeros", `"00"`},
		{"Fraction", `"1.0"`},
		{"Exponent", `"1e3"`},
		{"LeadingSpace", `" 1"`},
		{"TrailingSpace", `"1 "`},
		{"Empty", `""`},
		{"Overflow", `"18446744073709551616"`},
		{"Hex", `"0x10"`},
		{"NonASCIIDigit", `"١"`},
		{"Boolean", `true`},
		{"Object", `{}`},
	}
	for _, tt := range rejected {
		t.Run("Rejects"+tt.name, func(t *testing.T) {
			t.Parallel()
			resp := srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/test-widgets", Token: cred.Token,
				IdempotencyKey: "c10-bad-" + tt.name, Body: `{"name":"bad","count":` + tt.count + `}`})
			wantError(t, resp, http.StatusBadRequest, httpx.CodeInvalidArgument)
			if !strings.Contains(resp.Error.Message, "count") {
				t.Errorf("message %q does not name the field", resp.Error.Message)
			}
		})
	}
	t.Run("NothingRejectedWasStored", func(t *testing.T) {
		t.Parallel()
		var n int
		if err := srv.DB.QueryRow(`SELECT COUNT(*) FROM test_widgets WHERE name = 'bad'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("%d rejected widgets stored", n)
		}
	})
}

func TestC11_IDsAndNames(t *testing.T) {
	t.Parallel()
	srv, cred := setup(t)

	t.Run("IDsAndTimes", func(t *testing.T) {
		t.Parallel()
		resp := srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/test-widgets", Token: cred.Token,
			IdempotencyKey: "c11-ids", Body: `{"name":"ids"}`})
		var got createdWidget
		wantData(t, resp, http.StatusCreated, &got)
		for what, id := range map[string]string{"widget id": got.Widget.ID, "request id": resp.RequestID} {
			if len(id) != 32 || !httpx.ValidID(id) || strings.ToLower(id) != id {
				t.Errorf("%s %q is not 32 lowercase hex characters", what, id)
			}
		}
		ts := got.Widget.CreatedAt
		parsed, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil || !strings.HasSuffix(ts, "Z") || parsed.Location() != time.UTC {
			t.Fatalf("created_at %q is not RFC 3339 in UTC with Z: %v", ts, err)
		}
		var stored time.Time
		if err := srv.DB.QueryRow(`SELECT created_at FROM test_widgets WHERE id = ?`, got.Widget.ID).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if !parsed.Equal(stored) {
			t.Errorf("created_at %s, stored %s", parsed, stored)
		}
		if d := time.Since(parsed); d < 0 || d > time.Minute {
			t.Errorf("created_at %s is %s away from now", ts, d)
		}
	})

	t.Run("PathIDs", func(t *testing.T) {
		t.Parallel()
		w := createWidget(t, srv, cred.Token, "path")
		for _, tt := range []struct {
			name, id string
			status   int
		}{
			{"UpperCase", strings.ToUpper(w.ID), http.StatusBadRequest},
			{"TooShort", w.ID[:31], http.StatusBadRequest},
			{"TooLong", w.ID + "0", http.StatusBadRequest},
			{"NotHex", "g" + w.ID[1:], http.StatusBadRequest},
			{"Unknown", db.NewID(), http.StatusNotFound},
			{"Known", w.ID, http.StatusOK},
		} {
			resp := srv.Do(t, servertest.Request{Method: http.MethodGet, Path: "/v1/test-widgets/" + tt.id, Token: cred.Token})
			checkEnvelope(t, resp)
			if resp.Status != tt.status {
				t.Errorf("%s: status %d, want %d: %s", tt.name, resp.Status, tt.status, resp.Body)
			}
		}
	})

	names := []struct {
		name, value string
		ok          bool
	}{
		{"Letter", "a", true},
		{"Digit", "7", true},
		{"AllCharacters", "Az09._-x", true},
		{"MaxLength", "a" + strings.Repeat("b", 127), true},
		{"Empty", "", false},
		{"TooLong", "a" + strings.Repeat("b", 128), false},
		{"LeadingDot", ".a", false},
		{"LeadingDash", "-a", false},
		{"LeadingUnderscore", "_a", false},
		{"Space", "a b", false},
		{"Slash", "a/b", false},
		{"Colon", "a:b", false},
		{"NonASCII", "café", false},
		{"Control", "a\u0000", false},
	}
	for _, tt := range names {
		t.Run("Name"+tt.name, func(t *testing.T) {
			t.Parallel()
			body, _ := json.Marshal(map[string]string{"name": tt.value})
			resp := srv.Do(t, servertest.Request{Method: http.MethodPost, Path: "/v1/test-widgets", Token: cred.Token,
				IdempotencyKey: "c11-" + tt.name, Body: string(body)})
			if tt.ok {
				var got createdWidget
				wantData(t, resp, http.StatusCreated, &got)
				if got.Widget.Name != tt.value {
					t.Errorf("name %q came back as %q", tt.value, got.Widget.Name)
				}
				return
			}
			wantError(t, resp, http.StatusBadRequest, httpx.CodeInvalidArgument)
		})
	}
}

// ---- C-12: deadline ------------------------------------------------------------

// One rule for a bare '?' on HTTP routes and WebSocket upgrades: it is a
// malformed query, 400 INVALID_ARGUMENT, like an empty piece between '&'s.
func TestC9_BareQuestionMarkRefusedEverywhere(t *testing.T) {
	t.Parallel()
	srv, cred := setup(t)
	consumer := srv.Credential(t, servertest.CredentialParams{Permissions: []string{auth.PermEventsConsume, auth.PermTasksWork}})
	upgrade := func(protocol string) string {
		return "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n" +
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: " + protocol + "\r\n" +
			"Authorization: Bearer " + consumer.Token + "\r\n"
	}
	bearer := "Authorization: Bearer " + cred.Token + "\r\n"
	tests := []struct {
		name, target, header string
		want                 int
	}{
		{"Health", "/healthz?", "", http.StatusBadRequest},
		{"Route", "/v1/credential?", bearer, http.StatusBadRequest},
		{"List", "/v1/test-widgets?", bearer, http.StatusBadRequest},
		{"ListOnlyAmpersand", "/v1/test-widgets?&", bearer, http.StatusBadRequest},
		{"ListTrailingAmpersand", "/v1/test-widgets?limit=5&", bearer, http.StatusBadRequest},
		{"ListWithLimit", "/v1/test-widgets?limit=5", bearer, http.StatusOK},
		{"EventsUpgrade", "/v1/events/connect?", upgrade("orbit.events.v1"), http.StatusBadRequest},
		{"WorkersUpgrade", "/v1/workers/connect?", upgrade("orbit.workers.v1"), http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			conn := dialServer(t, srv)
			if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", tt.target, strings.TrimPrefix(srv.URL, "http://"), tt.header); err != nil {
				t.Fatal(err)
			}
			resp := readResponse(t, conn, bufio.NewReader(conn), time.Now().Add(connBound))
			if tt.want == http.StatusOK {
				wantData(t, resp, http.StatusOK, nil)
				return
			}
			wantError(t, resp, tt.want, httpx.CodeInvalidArgument)
			if resp.Error.Message != "malformed query string" {
				t.Errorf("message %q, want malformed query string", resp.Error.Message)
			}
		})
	}
}
