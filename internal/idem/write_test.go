package idem

import (
	"context"
	"database/sql"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/orbitrun/orbit/internal/auth"
)

// TestWriteRefusesBeforeTheDatabase covers the steps of Write that come
// before the idempotent change: none of them touches the database, so the
// pool is nil. The change itself is covered by the modules' HTTP tests.
func TestWriteRefusesBeforeTheDatabase(t *testing.T) {
	t.Parallel()
	type request struct {
		Name *string `json:"name"`
	}
	p := &auth.Principal{CredentialID: strings.Repeat("c", 32)}
	for _, tc := range []struct {
		name        string
		url, body   string
		prepareErr  error
		wantPrepare bool
		status      int
	}{
		{"QueryIsRefused", "/x?a=1", `{}`, nil, false, http.StatusBadRequest},
		{"UnknownMemberIsRefused", "/x", `{"other":1}`, nil, false, http.StatusBadRequest},
		{"PrepareError", "/x", `{"name":"a"}`, auth.ErrNotFound("queue"), true, http.StatusNotFound},
		{"NoIdempotencyKey", "/x", `{"name":"a"}`, nil, true, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodPost, tc.url, strings.NewReader(tc.body))
			r.Header.Set("Content-Type", "application/json")
			r = r.WithContext(auth.WithPrincipal(r.Context(), p))
			w := httptest.NewRecorder()
			var req request
			prepared := false
			Write(w, r, nil, &req, func(got *auth.Principal) (Change, error) {
				prepared = true
				if got != p {
					t.Errorf("prepare got principal %+v", got)
				}
				if req.Name == nil || *req.Name != "a" {
					t.Errorf("prepare ran before the body was decoded: %+v", req)
				}
				return func(context.Context, *sql.Tx) (int, any, error) {
					t.Error("change ran without an Idempotency-Key")
					return http.StatusOK, struct{}{}, nil
				}, tc.prepareErr
			})
			if prepared != tc.wantPrepare {
				t.Errorf("prepare called = %v, want %v", prepared, tc.wantPrepare)
			}
			if w.Code != tc.status {
				t.Errorf("status = %d, want %d; body %s", w.Code, tc.status, w.Body)
			}
			if !strings.Contains(w.Body.String(), `"error"`) {
				t.Errorf("body %s is not an error envelope", w.Body)
			}
		})
	}
}
