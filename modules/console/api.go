package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/httpx"
)

// apiReply is what an API handler wrote: a status, headers and the body.
type apiReply struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (a *apiReply) Header() http.Header { return a.header }

func (a *apiReply) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	return a.body.Write(b)
}

func (a *apiReply) WriteHeader(status int) {
	if a.status == 0 {
		a.status = status
	}
}

// envelope is the API's reply envelope (C-7).
type envelope struct {
	Data  json.RawMessage `json:"data"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// call runs one API request in process, as the session's credential: it
// is routed by the shared router to the API's own handler, which checks
// the permission, the queue grant and the ownership exactly as for a
// bearer token (auth.WithSessionPrincipal). target is the API path with
// its query; body, when not nil, is sent as JSON with the Idempotency-Key
// key. The reply's data is decoded into out (when not nil); an error
// reply is returned as an *httpx.Error with the API's code and message.
func (m *Module) call(r *http.Request, s *session, method, target string, body any, key string, out any) error {
	u, err := url.Parse(target)
	if err != nil {
		return fmt.Errorf("console: api path %q: %w", target, err)
	}
	var reader *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("console: encode %s %s: %w", method, u.Path, err)
		}
		reader = bytes.NewReader(b)
	} else {
		reader = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(auth.WithSessionPrincipal(r.Context(), s.Principal), method, u.String(), reader)
	if err != nil {
		return fmt.Errorf("console: %s %s: %w", method, u.Path, err)
	}
	req.RemoteAddr = r.RemoteAddr
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
	}
	reply := &apiReply{header: http.Header{}}
	m.api.ServeHTTP(reply, req)
	var env envelope
	if err := json.Unmarshal(reply.body.Bytes(), &env); err != nil {
		return fmt.Errorf("console: %s %s: reply %d is not an envelope", method, u.Path, reply.status)
	}
	if env.Error != nil {
		return &httpx.Error{Code: httpx.Code(env.Error.Code), Message: env.Error.Message}
	}
	if out != nil {
		if err := json.Unmarshal(env.Data, out); err != nil {
			return fmt.Errorf("console: %s %s: decode: %w", method, u.Path, err)
		}
	}
	return nil
}

// apiCode returns the API error code of err, or "".
func apiCode(err error) httpx.Code {
	var he *httpx.Error
	if errors.As(err, &he) {
		return he.Code
	}
	return ""
}
