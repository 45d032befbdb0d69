// Package orbit is the Go SDK of the Orbit task platform: a client for the
// HTTP API (tasks, credential) and a worker runner for the
// orbit.workers.v1 WebSocket protocol.
//
// Every HTTP response is an envelope {request_id, data} or
// {request_id, error: {code, message}}; the client decodes it, returning
// the data or an *APIError. Counters and revisions travel as decimal
// strings and are plain uint64 values in this package.
//
// Workers and event consumers reconnect by themselves after any failure
// that retrying can help, 503 UNAVAILABLE included (the server answers it
// while its database is unreachable): with exponential backoff and full
// jitter, capped at BackoffConfig.Max, 2 s by default, so that they are
// back at work within a few seconds of the server's or the database's
// return, however long the outage lasted.
package orbit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// defaultUserAgent is sent when WithUserAgent is not used.
const defaultUserAgent = "orbit-go-sdk"

// maxResponseBytes bounds a response body: a page of 100 tasks, each with a
// result of up to 256 KiB, fits.
const maxResponseBytes = 64 << 20

// Client calls the Orbit HTTP API with one credential. It is safe for
// concurrent use.
type Client struct {
	base      *url.URL
	token     string
	http      *http.Client
	userAgent string
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the client send its requests with hc instead of
// http.DefaultClient. Timeouts, proxies and TLS settings come from hc.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.http = hc
		}
	}
}

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(ua string) Option {
	return func(c *Client) {
		if ua != "" {
			c.userAgent = ua
		}
	}
}

// NewClient returns a client for the server at baseURL (for example
// "https://orbit.example.com" or "http://127.0.0.1:8080") that
// authenticates with token. The URL must be http or https and must not
// carry credentials, a query or a fragment: the token travels only in the
// Authorization header. NewClient does not contact the server.
func NewClient(baseURL, token string, opts ...Option) (*Client, error) {
	base, err := checkServer(baseURL, token)
	if err != nil {
		return nil, fmt.Errorf("orbit: NewClient: %w", err)
	}
	c := &Client{base: base, token: token, http: http.DefaultClient, userAgent: defaultUserAgent}
	for _, opt := range opts {
		opt(c)
	}
	return c, nil
}

// checkServer checks a server URL and the token that goes with it: the
// token must not be empty and must not appear in the URL.
func checkServer(baseURL, token string) (*url.URL, error) {
	base, err := parseBaseURL(baseURL)
	switch {
	case err != nil:
		return nil, err
	case token == "":
		return nil, errors.New("token is empty")
	case strings.Contains(baseURL, token):
		return nil, errors.New("base URL contains the token; credentials never travel in a URL")
	}
	return base, nil
}

// parseBaseURL checks a server URL: http or https, a host, no user
// information, query or fragment. Errors never repeat the URL, which might
// hold a secret.
func parseBaseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("base URL is not a valid URL")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, errors.New("base URL must start with http:// or https://")
	case u.Host == "":
		return nil, errors.New("base URL has no host")
	case u.User != nil:
		return nil, errors.New("base URL must not contain user information; credentials never travel in a URL")
	case u.RawQuery != "" || u.ForceQuery:
		return nil, errors.New("base URL must not contain a query; credentials never travel in a URL")
	case u.Fragment != "":
		return nil, errors.New("base URL must not contain a fragment")
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// endpoint returns the absolute URL of path under the base URL. path starts
// with "/" and is already escaped (IDs pass through url.PathEscape).
func endpoint(base *url.URL, path string, query url.Values) *url.URL {
	u := *base
	u.RawPath = base.EscapedPath() + path
	if p, err := url.PathUnescape(u.RawPath); err == nil {
		u.Path = p
	}
	u.RawQuery = query.Encode()
	return &u
}

// envelope is the body of every API response.
type envelope struct {
	RequestID string          `json:"request_id"`
	Data      json.RawMessage `json:"data"`
	Error     *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// do sends one request and decodes the envelope of its response into out
// (which may be nil). A non-empty key is sent as the Idempotency-Key.
// Network failures are returned wrapped; answers of the server are
// *APIError.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, key string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("orbit: %s %s: encode request: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, endpoint(c.base, path, query).String(), body)
	if err != nil {
		return fmt.Errorf("orbit: %s %s: %w", method, path, err)
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
	injectTrace(ctx, req.Header)
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("orbit: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return fmt.Errorf("orbit: %s %s: read response: %w", method, path, err)
	}
	if len(raw) > maxResponseBytes {
		return fmt.Errorf("orbit: %s %s: response exceeds %d bytes", method, path, maxResponseBytes)
	}
	if err := decodeEnvelope(resp, raw, out); err != nil {
		var apiErr *APIError
		if errors.As(err, &apiErr) {
			return err
		}
		return fmt.Errorf("orbit: %s %s: %w", method, path, err)
	}
	return nil
}

// decodeEnvelope turns a response into out or an *APIError. A body that
// is not an envelope is an *APIError with an empty Code; data that does not
// fit out is a plain error.
func decodeEnvelope(resp *http.Response, raw []byte, out any) error {
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil || (env.Error == nil && env.Data == nil) {
		ct := resp.Header.Get("Content-Type")
		if ct == "" {
			ct = "no content type"
		}
		return &APIError{
			Status:    resp.StatusCode,
			Message:   fmt.Sprintf("response is not an Orbit envelope (%s, %s)", resp.Status, ct),
			RequestID: resp.Header.Get("X-Request-ID"),
		}
	}
	if env.RequestID == "" {
		env.RequestID = resp.Header.Get("X-Request-ID")
	}
	if env.Error != nil || resp.StatusCode >= 300 {
		e := &APIError{Status: resp.StatusCode, RequestID: env.RequestID}
		if env.Error != nil {
			e.Code, e.Message = env.Error.Code, env.Error.Message
		} else {
			e.Message = "response carries data with status " + resp.Status
		}
		return e
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(env.Data, out); err != nil {
		return fmt.Errorf("decode response data (request %s): %w", env.RequestID, err)
	}
	return nil
}

// checkKey reports an empty idempotency key, which the server would
// refuse; the server checks the rest of the syntax.
func checkKey(op, key string) error {
	if key == "" {
		return fmt.Errorf("orbit: %s: an idempotency key is required", op)
	}
	return nil
}

// CredentialInfo describes the credential a client authenticates with, as
// GET /v1/credential returns it. It never holds the token.
type CredentialInfo struct {
	ID            string   `json:"id"`
	NamespaceID   string   `json:"namespace_id"`
	Namespace     string   `json:"namespace"`
	ApplicationID string   `json:"application_id"`
	Application   string   `json:"application"`
	EnvironmentID string   `json:"environment_id"`
	Environment   string   `json:"environment"`
	Permissions   []string `json:"permissions"`
	QueueIDs      []string `json:"queue_ids"`
}

// Credential returns the client's own credential: its scope, permissions
// and queue grants. It needs no permission and is a cheap way to check a
// token.
func (c *Client) Credential(ctx context.Context) (*CredentialInfo, error) {
	var info CredentialInfo
	if err := c.do(ctx, http.MethodGet, "/v1/credential", nil, "", nil, &info); err != nil {
		return nil, err
	}
	return &info, nil
}
