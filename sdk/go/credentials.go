package orbit

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
)

// Environment variables read by LoadCredentials and LoadCredentialsFromEnv.
const (
	// EnvCredentialsFile names the credentials file LoadCredentialsFromEnv
	// reads.
	EnvCredentialsFile = "ORBIT_CREDENTIALS_FILE"
	// EnvURL overrides the url of a credentials file.
	EnvURL = "ORBIT_URL"
	// EnvToken overrides the token of a credentials file.
	EnvToken = "ORBIT_TOKEN"
	// EnvQueueID overrides the queue_id of a credentials file.
	EnvQueueID = "ORBIT_QUEUE_ID"
)

// Credentials are the contents of the JSON file that `orbit admin
// bootstrap` writes: where the server is, the bearer token, and the scope
// and queue the token was made for. String, GoString and LogValue leave the
// token out, so printing or logging Credentials never reveals it.
type Credentials struct {
	URL           string
	Token         string
	CredentialID  string
	Namespace     string
	NamespaceID   string
	Application   string
	ApplicationID string
	Environment   string
	EnvironmentID string
	Queue         string
	QueueID       string
	Permissions   []string
}

// credentialsFile is the JSON form of Credentials: the format of the
// credentials file, defined here only.
type credentialsFile struct {
	URL           string   `json:"url"`
	Token         string   `json:"token"`
	CredentialID  string   `json:"credential_id"`
	Namespace     string   `json:"namespace"`
	NamespaceID   string   `json:"namespace_id"`
	Application   string   `json:"application"`
	ApplicationID string   `json:"application_id"`
	Environment   string   `json:"environment"`
	EnvironmentID string   `json:"environment_id"`
	Queue         string   `json:"queue"`
	QueueID       string   `json:"queue_id"`
	Permissions   []string `json:"permissions"`
}

// MarshalJSON encodes c in the format of the credentials file, token
// included: the JSON object that LoadCredentials reads and `orbit admin
// bootstrap` writes.
func (c Credentials) MarshalJSON() ([]byte, error) {
	return json.Marshal(credentialsFile(c))
}

// UnmarshalJSON decodes a credentials file into c as it is, without the
// environment overrides and checks of LoadCredentials. Unknown keys are
// ignored.
func (c *Credentials) UnmarshalJSON(data []byte) error {
	var f credentialsFile
	if err := json.Unmarshal(data, &f); err != nil {
		return err
	}
	*c = Credentials(f)
	return nil
}

// LoadCredentials reads the credentials file at path. The environment
// variables ORBIT_URL, ORBIT_TOKEN and ORBIT_QUEUE_ID, when set and not
// empty, override url, token and queue_id. After the overrides, url must
// be an http or https URL and token must not be empty. Errors name the file
// and the key at fault and never contain the token.
func LoadCredentials(path string) (*Credentials, error) {
	return loadCredentials(path, os.Getenv)
}

// LoadCredentialsFromEnv loads credentials as LoadCredentials does from the
// file named by ORBIT_CREDENTIALS_FILE. When that variable is not set, the
// credentials come from ORBIT_URL, ORBIT_TOKEN and ORBIT_QUEUE_ID alone,
// and ORBIT_URL and ORBIT_TOKEN are required.
func LoadCredentialsFromEnv() (*Credentials, error) {
	return loadCredentialsFromEnv(os.Getenv)
}

func loadCredentialsFromEnv(getenv func(string) string) (*Credentials, error) {
	if path := getenv(EnvCredentialsFile); path != "" {
		return loadCredentials(path, getenv)
	}
	c := &Credentials{}
	applyEnv(c, getenv)
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("orbit: credentials from the environment (%s is not set): %w", EnvCredentialsFile, err)
	}
	return c, nil
}

func loadCredentials(path string, getenv func(string) string) (*Credentials, error) {
	if err := CheckCredentialsFileMode(path); err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("orbit: credentials file: %w", err)
	}
	var f credentialsFile
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("orbit: credentials file %s: %w", path, describeJSONError(err))
	}
	if dec.More() {
		return nil, fmt.Errorf("orbit: credentials file %s: unexpected data after the JSON object", path)
	}
	c := Credentials(f)
	applyEnv(&c, getenv)
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("orbit: credentials file %s: %w", path, err)
	}
	return &c, nil
}

// describeJSONError rewords a decoding error without quoting the input, so
// that a token never ends up in an error message.
func describeJSONError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Errorf("invalid JSON at byte %d", syntax.Offset)
	case errors.As(err, &typ) && typ.Field != "":
		return fmt.Errorf("key %q has the wrong JSON type (%s)", typ.Field, typ.Value)
	case errors.As(err, &typ):
		return fmt.Errorf("the file must hold a JSON object, not %s", typ.Value)
	default:
		return errors.New("invalid JSON")
	}
}

// applyEnv applies the ORBIT_URL, ORBIT_TOKEN and ORBIT_QUEUE_ID overrides.
func applyEnv(c *Credentials, getenv func(string) string) {
	if v := getenv(EnvURL); v != "" {
		c.URL = v
	}
	if v := getenv(EnvToken); v != "" {
		c.Token = v
	}
	if v := getenv(EnvQueueID); v != "" {
		c.QueueID = v
	}
}

// check reports the first key that makes c unusable.
func (c Credentials) check() error {
	switch {
	case c.URL == "":
		return fmt.Errorf("key \"url\" is missing or empty (or set %s)", EnvURL)
	case c.Token == "":
		return fmt.Errorf("key \"token\" is missing or empty (or set %s)", EnvToken)
	}
	if _, err := parseBaseURL(c.URL); err != nil {
		return fmt.Errorf("key \"url\": %w", err)
	}
	return nil
}

// NewClient returns a client for c.URL authenticating with c.Token, as
// NewClient(c.URL, c.Token, opts...) does.
func (c Credentials) NewClient(opts ...Option) (*Client, error) {
	return NewClient(c.URL, c.Token, opts...)
}

// String describes the credentials without the token.
func (c Credentials) String() string {
	return fmt.Sprintf("orbit.Credentials{URL: %q, CredentialID: %q, Namespace: %q, Application: %q, Environment: %q, Queue: %q, QueueID: %q, Permissions: %q, Token: [redacted]}",
		c.URL, c.CredentialID, c.Namespace, c.Application, c.Environment, c.Queue, c.QueueID, c.Permissions)
}

// GoString is String, so that %#v does not print the token either.
func (c Credentials) GoString() string { return c.String() }

// LogValue describes the credentials to log/slog without the token.
func (c Credentials) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("url", c.URL),
		slog.String("credential_id", c.CredentialID),
		slog.String("namespace", c.Namespace),
		slog.String("application", c.Application),
		slog.String("environment", c.Environment),
		slog.String("queue", c.Queue),
		slog.String("queue_id", c.QueueID),
	)
}

var (
	_ fmt.Stringer     = Credentials{}
	_ fmt.GoStringer   = Credentials{}
	_ slog.LogValuer   = Credentials{}
	_ json.Marshaler   = Credentials{}
	_ json.Unmarshaler = (*Credentials)(nil)
)

// CheckCredentialsFileMode refuses a credentials file that other users may
// read or write (any group or other permission bit, as ssh does for its
// keys): the token in it is a password. orbit admin writes them 0600. On
// Windows, whose permissions are not mode bits, it checks nothing.
func CheckCredentialsFileMode(path string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	info, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("orbit: credentials file: %w", err)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("orbit: credentials file %s is accessible to other users (mode %04o); run: chmod 600 %s", path, perm, path)
	}
	return nil
}
