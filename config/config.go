// Package config loads the orbit YAML file and ORBIT_* environment variables.
//
// Precedence, highest first: command-line flag, environment variable, file,
// default. Every key has one name in the file (`server.listen`) and one in the
// environment (ORBIT_SERVER_LISTEN: upper case, dots and dashes become
// underscores). Keys are matched exactly; an unknown or misspelled key is an
// error that names it and its line.
package config

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Defaults of the core sections.
const (
	DefaultListen          = "127.0.0.1:8080"
	DefaultRequestDeadline = 8 * time.Second
	DefaultShutdownTimeout = 10 * time.Second
	DefaultIdleTimeout     = 60 * time.Second
	// DefaultMaxConnections leaves room for the 128 event and 128 worker
	// WebSocket connections of a node and some 750 HTTP clients.
	DefaultMaxConnections = 1024
	DefaultMaxOpenConns   = 32
	DefaultLogLevel       = "info"
	DefaultLogFormat      = "text"
	// DefaultGCPercent is the garbage collector's target of a server
	// process (what GOGC sets): the heap may grow to 5 times what is live
	// before a collection. A node's live heap is tens of MiB, and at Go's
	// 100 the collector took about a tenth of a drain's CPU.
	DefaultGCPercent = 400
	// MinGCPercent and MaxGCPercent bound server.gc_percent: below 25 the
	// collector runs nearly all the time; above 10000 the heap may grow
	// to a hundred times what is live.
	MinGCPercent = 25
	MaxGCPercent = 10000
	// DefaultMetricsListen serves GET /metrics on loopback only.
	DefaultMetricsListen = "127.0.0.1:9090"
	// DefaultMetricsRefreshInterval is how often the database-backed
	// gauges are recomputed.
	DefaultMetricsRefreshInterval = 10 * time.Second
	// DefaultTraceSampleRatio samples every trace that starts at the
	// server; a span with a parent follows its parent's decision.
	DefaultTraceSampleRatio = 1.0
)

// Config holds the core sections shared by every command. Module sections
// live with their modules and are decoded by the same loader.
type Config struct {
	Server   Server   `yaml:"server"`
	Database Database `yaml:"database"`
	Log      Log      `yaml:"log"`
	Metrics  Metrics  `yaml:"metrics"`
	Tracing  Tracing  `yaml:"tracing"`
}

// Server configures the HTTP listener of `orbit serve`.
type Server struct {
	// Listen is the TCP address, host:port.
	Listen string `yaml:"listen"`
	// Modules lists the modules to run; empty means every server module.
	Modules []string `yaml:"modules"`
	// RequestDeadline bounds every management request (C-12).
	RequestDeadline time.Duration `yaml:"request_deadline"`
	// ShutdownTimeout bounds a graceful stop.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// IdleTimeout closes a keep-alive connection that waits this long for
	// its next request.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxConnections bounds the open TCP connections of the listener,
	// WebSocket connections included; more wait to be accepted.
	MaxConnections int `yaml:"max_connections"`
	// TLSCertFile and TLSKeyFile, when both set, make the server speak HTTPS.
	TLSCertFile string `yaml:"tls_cert_file"`
	TLSKeyFile  string `yaml:"tls_key_file"`
	// PublicURL is the address clients use, written into credentials files.
	// Empty means http://<listen>.
	PublicURL string `yaml:"public_url"`
	// MetricsListen is the TCP address of the separate listener that
	// serves GET /metrics without a credential (O-1); empty disables it.
	// Never the API listener.
	MetricsListen string `yaml:"metrics_listen"`
	// GCPercent is the garbage collector's target of `orbit serve` and
	// `orbit dev`, as GOGC sets it; the GOGC environment variable, when
	// set, wins.
	GCPercent int `yaml:"gc_percent"`
}

// Metrics configures the node's Prometheus metrics.
type Metrics struct {
	// RefreshInterval is how often the node's one background collector
	// recomputes the gauges that need the database (O-3). A scrape never
	// queries the database.
	RefreshInterval time.Duration `yaml:"refresh_interval"`
}

// Database configures the platform database.
type Database struct {
	// DSN is a go-sql-driver/mysql DSN naming the database explicitly. Also
	// read from ORBIT_MYSQL_DSN.
	DSN string `yaml:"dsn"`
	// FailoverDSNs are DSNs of the same database on other servers (nodes
	// of a Galera cluster), tried in order, wrapping around, when a new
	// connection to the current one fails; Orbit stays on the one it moved
	// to (internal/db.Connector). Also read from
	// ORBIT_DATABASE_FAILOVER_DSNS, comma-separated.
	FailoverDSNs []string `yaml:"failover_dsns"`
	// Migrate applies pending migrations when `orbit serve` starts.
	Migrate bool `yaml:"migrate"`
	// MaxOpenConns bounds the connection pool.
	MaxOpenConns int `yaml:"max_open_conns"`
}

// Log configures the structured log on standard error.
type Log struct {
	// Level is debug, info, warn or error.
	Level string `yaml:"level"`
	// Format is text or json.
	Format string `yaml:"format"`
}

// Tracing configures the export of the server's spans (O-5). Trace
// context sent by clients is stored and passed on whether or not it is set.
type Tracing struct {
	// OTLPEndpoint is the OTLP/HTTP traces URL of a collector, such as
	// http://127.0.0.1:4318 (a URL without a path gets /v1/traces). Empty,
	// the default, exports nothing and starts no span.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// SampleRatio is the share of traces starting at the server that are
	// sampled, 0 to 1.
	SampleRatio float64 `yaml:"sample_ratio"`
}

// Default returns the core config with every default filled in.
func Default() *Config {
	return &Config{
		Server: Server{
			Listen:          DefaultListen,
			RequestDeadline: DefaultRequestDeadline,
			ShutdownTimeout: DefaultShutdownTimeout,
			IdleTimeout:     DefaultIdleTimeout,
			MaxConnections:  DefaultMaxConnections,
			MetricsListen:   DefaultMetricsListen,
			GCPercent:       DefaultGCPercent,
		},
		Metrics:  Metrics{RefreshInterval: DefaultMetricsRefreshInterval},
		Database: Database{MaxOpenConns: DefaultMaxOpenConns},
		Log:      Log{Level: DefaultLogLevel, Format: DefaultLogFormat},
		Tracing:  Tracing{SampleRatio: DefaultTraceSampleRatio},
	}
}

// Validate returns every problem of the core sections, each naming its key.
func (c *Config) Validate() error { return c.ValidateAt(nil) }

// ValidateAt is Validate with the positions Load recorded (Source.Positions):
// a problem of a key the file set starts with its file and line.
func (c *Config) ValidateAt(positions map[string]string) error {
	problems := NewProblems("")
	problems.positions = positions
	add := problems.Add
	if reason := listenProblem(c.Server.Listen); reason != "" {
		add("server.listen", "%s", reason)
	}
	if c.Server.MetricsListen != "" {
		if reason := listenProblem(c.Server.MetricsListen); reason != "" {
			add("server.metrics_listen", "%s (or empty to disable metrics)", reason)
		} else if c.Server.MetricsListen == c.Server.Listen && !strings.HasSuffix(c.Server.Listen, ":0") {
			add("server.metrics_listen", "must differ from server.listen: metrics are never served on the API listener")
		}
	}
	problems.Positive("metrics.refresh_interval", c.Metrics.RefreshInterval)
	problems.Positive("server.request_deadline", c.Server.RequestDeadline)
	problems.Positive("server.shutdown_timeout", c.Server.ShutdownTimeout)
	problems.Positive("server.idle_timeout", c.Server.IdleTimeout)
	problems.AtLeastOne("server.max_connections", c.Server.MaxConnections)
	if n := c.Server.GCPercent; n < MinGCPercent || n > MaxGCPercent {
		add("server.gc_percent", "must be between %d and %d, got %d", MinGCPercent, MaxGCPercent, n)
	}
	if (c.Server.TLSCertFile == "") != (c.Server.TLSKeyFile == "") {
		add("server.tls_cert_file", "tls_cert_file and tls_key_file must be set together")
	}
	if reason := dsnProblem(c.Database.DSN); reason != "" {
		add("database.dsn", "%s", reason)
	}
	if len(c.Database.FailoverDSNs) > 0 && c.Database.DSN == "" {
		add("database.failover_dsns", "needs database.dsn (ORBIT_MYSQL_DSN): the failover DSNs are tried after it")
	}
	seen := map[string]bool{c.Database.DSN: true}
	for i, dsn := range c.Database.FailoverDSNs {
		key := fmt.Sprintf("database.failover_dsns[%d]", i)
		switch {
		case dsn == "":
			add(key, "must not be empty")
		case dsnProblem(dsn) != "":
			add(key, "%s", dsnProblem(dsn))
		case seen[dsn]:
			add(key, "repeats database.dsn or an earlier entry")
		}
		seen[dsn] = true
	}
	problems.AtLeastOne("database.max_open_conns", c.Database.MaxOpenConns)
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		add("log.level", "must be debug, info, warn or error, got %q", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		add("log.format", "must be text or json, got %q", c.Log.Format)
	}
	if reason := endpointProblem(c.Tracing.OTLPEndpoint); reason != "" {
		add("tracing.otlp_endpoint", "%s", reason)
	}
	if r := c.Tracing.SampleRatio; !(r >= 0 && r <= 1) {
		add("tracing.sample_ratio", "must be between 0 and 1, got %v", r)
	}
	return problems.Err()
}

// listenProblem returns what is wrong with a listen address, or "".
func listenProblem(listen string) string {
	if listen == "" {
		return "must not be empty"
	}
	_, port, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Sprintf("must be host:port, such as %s or :8080, got %q", DefaultListen, listen)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Sprintf("must end in a port number from 0 to 65535, got %q", listen)
	}
	return ""
}

// endpointProblem returns what is wrong with a non-empty OTLP endpoint, or
// "". The message never repeats the URL, which might hold a secret.
func endpointProblem(endpoint string) string {
	if endpoint == "" {
		return ""
	}
	u, err := url.Parse(endpoint)
	switch {
	case err != nil:
		return "is not a valid URL"
	case u.Scheme != "http" && u.Scheme != "https":
		return "must be an http:// or https:// URL, such as http://127.0.0.1:4318"
	case u.Host == "":
		return "has no host"
	case u.User != nil:
		return "must not contain user information"
	case u.RawQuery != "" || u.Fragment != "":
		return "must not contain a query or a fragment"
	}
	return ""
}

// dsnProblem returns what is wrong with a non-empty DSN, or "". The
// message never contains the DSN: the driver's own messages can quote
// parts of it, which a DSN with an unescaped '/' or '@' in the password
// shifts into the database name or the parameters, so only its fixed
// messages are passed on.
func dsnProblem(dsn string) string {
	if dsn == "" {
		// Commands then use the database of `orbit dev`.
		return ""
	}
	parsed, err := mysql.ParseDSN(dsn)
	switch {
	case err != nil && strings.HasPrefix(err.Error(), "invalid DSN: "):
		return "is not a valid go-sql-driver/mysql DSN: " + strings.TrimPrefix(err.Error(), "invalid DSN: ")
	case err != nil:
		return "is not a valid go-sql-driver/mysql DSN: a parameter or the database name cannot be parsed"
	case parsed.DBName == "":
		return "must name the database, as in user:password@tcp(host:3306)/orbit"
	}
	return ""
}

// URL returns the address clients should use to reach this server.
func (s Server) URL() string {
	if s.PublicURL != "" {
		return s.PublicURL
	}
	scheme := "http"
	if s.TLSCertFile != "" {
		scheme = "https"
	}
	return scheme + "://" + s.Listen
}
