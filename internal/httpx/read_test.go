package httpx

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestC9_Read(t *testing.T) {
	t.Parallel()
	type item struct {
		Name string `json:"name"`
	}
	for _, tc := range []struct {
		name     string
		url      string
		readErr  error
		status   int
		wantRead bool
		want     string // data or error code
	}{
		{"Data", "/x?name=a", nil, http.StatusOK, true, `{"name":"a"}`},
		{"NoQuery", "/x", nil, http.StatusOK, true, `{"name":""}`},
		{"UnknownParameterIsRefusedBeforeRead", "/x?other=1", nil, http.StatusBadRequest, false, string(CodeInvalidArgument)},
		{"BareQuestionMark", "/x?", nil, http.StatusBadRequest, false, string(CodeInvalidArgument)},
		{"ReadError", "/x", Errorf(CodeNotFound, "item not found"), http.StatusNotFound, true, string(CodeNotFound)},
		{"InternalError", "/x", errors.New("boom"), http.StatusInternalServerError, true, string(CodeInternal)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			read := false
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				Read(w, r, []string{"name"}, func(q map[string]string) (item, error) {
					read = true
					return item{Name: q["name"]}, tc.readErr
				})
			})
			logger, _ := testLogger()
			w := serve(t, MiddlewareOptions{Logger: logger}, h, httptest.NewRequest(http.MethodGet, tc.url, nil))
			if w.Code != tc.status {
				t.Errorf("status = %d, want %d; body %s", w.Code, tc.status, w.Body)
			}
			if read != tc.wantRead {
				t.Errorf("read called = %v, want %v", read, tc.wantRead)
			}
			env := checkEnvelope(t, w)
			if tc.status == http.StatusOK {
				if string(env.Data) != tc.want {
					t.Errorf("data = %s, want %s", env.Data, tc.want)
				}
			} else if env.Error == nil || string(env.Error.Code) != tc.want {
				t.Errorf("error = %+v, want %s", env.Error, tc.want)
			}
		})
	}
}

func TestC16_PageSQL(t *testing.T) {
	t.Parallel()
	q, args := PageSQL("SELECT id FROM t WHERE q = ?", []any{"q1"}, "", nil, 20)
	if want := "SELECT id FROM t WHERE q = ? ORDER BY created_at DESC, id DESC LIMIT ?"; q != want {
		t.Errorf("query = %q, want %q", q, want)
	}
	if len(args) != 2 || args[0] != "q1" || args[1] != 21 {
		t.Errorf("args = %v", args)
	}
	at := time.Date(2025, 1, 2, 3, 4, 5, 6000, time.UTC)
	q, args = PageSQL("SELECT s.id FROM s WHERE s.q = ?", []any{"q1"}, "s.", &Cursor{CreatedAt: at, ID: "ab"}, 5)
	if want := "SELECT s.id FROM s WHERE s.q = ? AND (s.created_at < ? OR (s.created_at = ? AND s.id < ?)) ORDER BY s.created_at DESC, s.id DESC LIMIT ?"; q != want {
		t.Errorf("query = %q, want %q", q, want)
	}
	if want := []any{"q1", at, at, "ab", 6}; fmt.Sprint(args) != fmt.Sprint(want) {
		t.Errorf("args = %v, want %v", args, want)
	}
}
