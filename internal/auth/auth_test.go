package auth_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/orbitrun/orbit/internal/auth"
)

// fake authenticates "Bearer good" with tasks:read and counts its calls.
type fake struct{ calls int }

func (f *fake) Authenticate(_ context.Context, header string) (*auth.Principal, error) {
	f.calls++
	if header != "Bearer good" {
		return nil, auth.ErrUnauthenticated
	}
	return &auth.Principal{CredentialID: "c", Permissions: map[string]bool{auth.PermTasksRead: true}}, nil
}

func (*fake) CheckGrants(context.Context, auth.Querier, []auth.Grant) ([]error, error) {
	return nil, errors.New("not used")
}

func TestC1_AuthenticateRequestRefusesBeforeConsulting(t *testing.T) {
	t.Parallel()
	for name, values := range map[string][]string{
		"None":     nil,
		"Two":      {"Bearer good", "Bearer good"},
		"Basic":    {"Basic Z29vZA=="},
		"NoToken":  {"Bearer "},
		"BadChars": {"Bearer go od"},
	} {
		f := &fake{}
		h := http.Header{"Authorization": values}
		if p, err := auth.AuthenticateRequest(t.Context(), f, h); p != nil || !errors.Is(err, auth.ErrUnauthenticated) || f.calls != 0 {
			t.Errorf("%s: %+v, %v after %d calls; want ErrUnauthenticated without a call", name, p, err, f.calls)
		}
	}
	f := &fake{}
	p, err := auth.AuthenticateRequest(t.Context(), f, http.Header{"Authorization": {"Bearer good"}})
	if err != nil || p.CredentialID != "c" || f.calls != 1 {
		t.Errorf("good: %+v, %v after %d calls; want the principal after one", p, err, f.calls)
	}
}

func TestC3_Require(t *testing.T) {
	t.Parallel()
	var seen *auth.Principal
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = auth.FromContext(r.Context()) })
	for _, tc := range []struct {
		name, header, perm string
		status             int
	}{
		{"Unauthenticated", "Bearer bad", "", http.StatusUnauthorized},
		{"MissingPermission", "Bearer good", auth.PermTasksSubmit, http.StatusForbidden},
		{"Permitted", "Bearer good", auth.PermTasksRead, http.StatusOK},
		{"AuthenticationOnly", "Bearer good", "", http.StatusOK},
	} {
		seen = nil
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Authorization", tc.header)
		w := httptest.NewRecorder()
		auth.Require(&fake{}, tc.perm, next).ServeHTTP(w, r)
		if w.Code != tc.status || (tc.status == http.StatusOK) != (seen != nil) {
			t.Errorf("%s: status %d, principal %+v; want %d", tc.name, w.Code, seen, tc.status)
		}
	}
}
