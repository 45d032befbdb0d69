package httpx

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
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
