package db

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

const (
	// DefaultMaxOpenConns is the pool size Open sets. A caller that wants
	// another size calls SetMaxOpenConns and SetMaxIdleConns on the pool.
	DefaultMaxOpenConns = 32

	// connMaxLifetime makes the pool replace connections regularly, so that
	// a load balancer or a failover in front of MySQL is followed.
	connMaxLifetime = 5 * time.Minute

	// dialTimeout bounds connecting when the DSN sets no timeout.
	dialTimeout = 10 * time.Second
)

// sessionSetup runs on every new connection. Isolation is set with SET
// SESSION TRANSACTION rather than a system variable because the variable's
// name differs: MariaDB 10.11 knows only tx_isolation, MySQL 8.4 only
// transaction_isolation.
var sessionSetup = []string{
	"SET time_zone = '+00:00'",
	"SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
}

// Open returns a connection pool for dsn, a go-sql-driver/mysql DSN such as
// "user:password@tcp(127.0.0.1:3306)/orbit", and checks that the server
// answers. Whatever the DSN says, times are scanned as UTC time.Time
// (parseTime, loc=UTC), each connection uses time_zone '+00:00' and READ
// COMMITTED, statements with arguments are sent in one round trip
// (interpolateParams) and one call runs one statement (no multiStatements).
// The pool holds up to DefaultMaxOpenConns connections, each replaced after
// five minutes. Errors show the DSN without its password.
func Open(ctx context.Context, dsn string) (*sql.DB, error) {
	return OpenList(ctx, []string{dsn}, nil)
}

// OpenList is Open for a list of DSNs naming the same database on several
// servers, such as the nodes of a Galera cluster: dsns[0] is the primary
// and the others are tried in order when it fails, as Connector says.
// Switches are logged as warnings to logger (nil means slog.Default()).
// PoolConnector returns the pool's Connector.
func OpenList(ctx context.Context, dsns []string, logger *slog.Logger) (*sql.DB, error) {
	c, err := newConnector(dsns, logger)
	if err != nil {
		return nil, err
	}
	pool := sql.OpenDB(c)
	pool.SetMaxOpenConns(DefaultMaxOpenConns)
	pool.SetMaxIdleConns(DefaultMaxOpenConns)
	pool.SetConnMaxLifetime(connMaxLifetime)
	if err := pool.PingContext(ctx); err != nil {
		pool.Close()
		if !strings.HasPrefix(err.Error(), "db: ") { // not already the Connector's
			err = fmt.Errorf("db: open: %w", err)
		}
		return nil, err
	}
	return pool, nil
}

// RedactDSN returns dsn with its password replaced by "xxxxx", for logs and
// error messages. A DSN that does not parse is returned as "(invalid DSN)".
func RedactDSN(dsn string) string {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "(invalid DSN)"
	}
	return redactConfig(cfg)
}

func redactConfig(cfg *mysql.Config) string {
	cfg = cfg.Clone()
	if cfg.Passwd != "" {
		cfg.Passwd = "xxxxx"
	}
	return cfg.FormatDSN()
}

// redactText removes from text whatever could be the password of dsn, that
// is everything between the first ':' and the last '@'. It is used on the
// driver's parse errors, which may quote parts of a DSN that did not parse.
func redactText(text, dsn string) string {
	colon := strings.IndexByte(dsn, ':')
	at := strings.LastIndexByte(dsn, '@')
	if colon < 0 || at <= colon+1 {
		return text
	}
	return strings.ReplaceAll(text, dsn[colon+1:at], "xxxxx")
}
