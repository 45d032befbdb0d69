// Package client is the HTTP client of the orbit command line's client
// commands (orbit queue, task, sub): it finds the server and the
// credential, sends requests with the token, and returns the data of each
// reply exactly as the server sent it, so that `-o json` prints every
// member the server knows, new ones included.
//
// It uses the Go SDK (sdk/go) for the credentials file format only; the
// event consumer of `orbit events tail` uses the SDK's EventConsumer. The
// HTTP calls are made here rather than with the SDK's typed methods
// because the command line prints what the server answered verbatim and
// calls endpoints the SDK does not wrap.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	orbit "github.com/orbitrun/orbit/sdk/go"
)

// Defaults and environment variables of the client commands.
const (
	// DefaultServer is the server URL when neither --server, ORBIT_URL nor
	// the credentials file names one.
	DefaultServer = "http://127.0.0.1:8080"
	// DevCredentialsFile is what `orbit dev` writes, used when neither
	// --credentials nor ORBIT_CREDENTIALS_FILE names a file.
	DevCredentialsFile = ".local/dev.credentials.json"
	// EnvCredentialsFile, EnvURL and EnvToken are the SDK's variables.
	EnvCredentialsFile = orbit.EnvCredentialsFile
	EnvURL             = orbit.EnvURL
	EnvToken           = orbit.EnvToken
	// requestTimeout bounds one HTTP request.
	requestTimeout = 30 * time.Second
	// maxResponseBytes bounds a reply: a page of 100 tasks with 256 KiB
	// results fits.
	maxResponseBytes = 64 << 20
)

// Options say where the server and the credential are. Empty fields fall
// back to the environment, then to defaults.
type Options struct {
	// Server is --server.
	Server string
	// CredentialsFile is --credentials.
	CredentialsFile string
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
	// UserAgent is sent with every request.
	UserAgent string
}

// Client calls one server with one credential.
type Client struct {
	base      *url.URL
	token     string
	http      *http.Client
	userAgent string
	// Credentials are what the credentials file said (its queue is the
	// default queue of the commands); the token is left out of every
	// printed form.
	Credentials orbit.Credentials
}

// New finds the credential and the server: the credentials file is
// --credentials, else ORBIT_CREDENTIALS_FILE, else .local/dev.credentials.json
// when it exists; ORBIT_TOKEN overrides its token. The server is --server,
// else ORBIT_URL, else the file's url, else DefaultServer. Errors name the
// flag or variable at fault and never contain the token.
func New(o Options) (*Client, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	var creds orbit.Credentials
	path, source := o.CredentialsFile, "--credentials"
	if path == "" {
		path, source = getenv(EnvCredentialsFile), EnvCredentialsFile
	}
	if path == "" {
		if _, err := os.Stat(DevCredentialsFile); err == nil {
			path, source = DevCredentialsFile, DevCredentialsFile+" (written by orbit dev)"
		}
	}
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("%s: no file %s", source, path)
			}
			return nil, fmt.Errorf("%s: %w", source, err)
		}
		if err := orbit.CheckCredentialsFileMode(path); err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
		}
		if err := json.Unmarshal(raw, &creds); err != nil {
			return nil, fmt.Errorf("%s: %s is not a credentials file (invalid JSON)", source, path)
		}
	}
	if t := getenv(EnvToken); t != "" {
		creds.Token = t
	}
	if creds.Token == "" {
		if path == "" {
			return nil, fmt.Errorf("--credentials: no credential: pass --credentials FILE, set %s or %s, or run orbit dev here", EnvCredentialsFile, EnvToken)
		}
		return nil, fmt.Errorf("%s: %s has no token", source, path)
	}
	server, serverSource := o.Server, "--server"
	if server == "" {
		server, serverSource = getenv(EnvURL), EnvURL
	}
	if server == "" {
		server, serverSource = creds.URL, "the url of "+path
	}
	if server == "" {
		server, serverSource = DefaultServer, "--server"
	}
	base, err := parseServer(server)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", serverSource, err)
	}
	if strings.Contains(server, creds.Token) {
		return nil, fmt.Errorf("%s: the URL contains the token; credentials never travel in a URL", serverSource)
	}
	creds.URL = base.String()
	ua := o.UserAgent
	if ua == "" {
		ua = "orbit-cli"
	}
	return &Client{base: base, token: creds.Token, http: &http.Client{Timeout: requestTimeout}, userAgent: ua, Credentials: creds}, nil
}

// parseServer checks a server URL: http or https with a host, and nothing
// that could carry a secret. Errors never repeat the URL.
func parseServer(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, errors.New("not a valid URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, errors.New("the URL must start with http:// or https://")
	case u.Host == "":
		return nil, errors.New("the URL has no host")
	case u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return nil, errors.New("the URL must not contain user information, a query or a fragment")
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// Server returns the server's base URL.
func (c *Client) Server() string { return c.base.String() }

// Token returns the bearer token, for the event consumer only.
func (c *Client) Token() string { return c.token }

// Error is an error answered by the server.
type Error struct {
	Status    int
	Code      string
	Message   string
	RequestID string
}

// Error returns the code, the message, the status and the request id.
func (e *Error) Error() string {
	code := e.Code
	if code == "" {
		code = "unexpected response"
	}
	s := code
	if e.Message != "" {
		s += ": " + e.Message
	}
	s += fmt.Sprintf(" (HTTP %d", e.Status)
	if e.RequestID != "" {
		s += ", request " + e.RequestID
	}
	return s + ")"
}

// IsCode reports whether err is an *Error with code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// NewKey returns a fresh Idempotency-Key: "orbit-cli-" and 32 random hex
// digits.
func NewKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return "orbit-cli-" + hex.EncodeToString(b)
}

// Get sends GET path?query and returns the reply's data.
func (c *Client) Get(ctx context.Context, path string, query url.Values) (json.RawMessage, error) {
	return c.Do(ctx, http.MethodGet, path, query, "", nil)
}

// Do sends one request with body in (nil: none) and the Idempotency-Key
// key (empty: none), and returns the data of the reply, or an *Error for
// an error reply. path holds only ids, which need no escaping.
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, key string, in any) (json.RawMessage, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("%s %s: encode request: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	u := *c.base
	u.Path = c.base.Path + path
	u.RawPath = ""
	u.RawQuery = query.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is printed once, below
		}
		return nil, fmt.Errorf("%s %s%s: %w", method, c.base, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s %s: read reply: %w", method, path, err)
	}
	if len(raw) > maxResponseBytes {
		return nil, fmt.Errorf("%s %s: reply exceeds %d bytes", method, path, maxResponseBytes)
	}
	var env struct {
		RequestID string          `json:"request_id"`
		Data      json.RawMessage `json:"data"`
		Error     *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &env); err != nil || (env.Error == nil && env.Data == nil) {
		return nil, &Error{Status: resp.StatusCode, Message: fmt.Sprintf("the reply is not an Orbit envelope (%s); is %s an Orbit server?", resp.Status, c.base), RequestID: resp.Header.Get("X-Request-ID")}
	}
	if env.Error != nil || resp.StatusCode >= 300 {
		e := &Error{Status: resp.StatusCode, RequestID: env.RequestID}
		if env.Error != nil {
			e.Code, e.Message = env.Error.Code, env.Error.Message
		}
		return nil, e
	}
	return env.Data, nil
}
