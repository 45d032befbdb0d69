package db

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
)

// wsrepSynced is wsrep_local_state of a node that serves clients: Synced.
// 1 is Joining, 2 Donor/Desynced, 3 Joined.
const wsrepSynced = "4"

// ErrNotReady is wrapped by the error of a dial that reached a Galera node
// (wsrep_on) that is not ready for clients: wsrep_ready is not ON or
// wsrep_local_state is not 4 (Synced). Such a node answers most
// statements with error 1047, "WSREP has not yet prepared node for
// application use". IsUnavailable reports both.
var ErrNotReady = errors.New("db: Galera node not ready")

// Connector is the driver.Connector of every pool Open and OpenList make:
// it dials one DSN of a list and runs the session setup on each new
// connection.
//
// It is sticky: every new connection goes to the active DSN, the first of
// the list at the start. When a dial to it fails because the server cannot
// be reached, is going away or full (IsUnavailable), or is a Galera node
// that is not ready, the Connector tries the next DSNs in order, wrapping
// around, and the first that answers becomes the active one; a warning
// naming it (RedactDSN) goes to the logger. It never moves back by itself,
// so that all writes go through one node: only a failed dial to the active
// DSN, or a restart, moves it. Idle connections to a DSN that is no longer
// active are closed instead of being reused; a transaction under way keeps
// its connection to the end.
//
// Its methods are safe for concurrent use.
type Connector struct {
	targets  []target
	logger   *slog.Logger
	active   atomic.Int32
	switches atomic.Int64
}

// target is one DSN of the list.
type target struct {
	conn     driver.Connector
	redacted string
}

// newConnector returns a Connector over dsns, go-sql-driver/mysql DSNs of
// the same database on different servers, tried in this order. It applies
// what Open documents to each (UTC, interpolateParams, no multiStatements,
// a 10 s dial timeout when the DSN sets none). Switches are logged to
// logger; nil means slog.Default(). It dials nothing.
func newConnector(dsns []string, logger *slog.Logger) (*Connector, error) {
	if len(dsns) == 0 {
		return nil, errors.New("db: no DSN")
	}
	if logger == nil {
		logger = slog.Default()
	}
	c := &Connector{logger: logger}
	for i, dsn := range dsns {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			if len(dsns) == 1 {
				return nil, errors.New("db: parse DSN: " + redactText(err.Error(), dsn))
			}
			return nil, fmt.Errorf("db: parse DSN %d: %s", i, redactText(err.Error(), dsn))
		}
		// Named as the operator wrote it, without the settings below.
		redacted := redactConfig(cfg)
		cfg.ParseTime = true
		cfg.Loc = time.UTC
		cfg.InterpolateParams = true
		cfg.MultiStatements = false
		if cfg.Timeout == 0 {
			cfg.Timeout = dialTimeout
		}
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			return nil, fmt.Errorf("db: DSN %s: %w", redacted, err)
		}
		c.targets = append(c.targets, target{conn: conn, redacted: redacted})
	}
	return c, nil
}

// Active returns the index in the list of the DSN new connections go to.
func (c *Connector) Active() int { return int(c.active.Load()) }

// ActiveDSN returns the active DSN without its password.
func (c *Connector) ActiveDSN() string { return c.targets[c.Active()].redacted }

// Switches returns how often the active DSN has changed.
func (c *Connector) Switches() int64 { return c.switches.Load() }

// Len returns the number of DSNs in the list.
func (c *Connector) Len() int { return len(c.targets) }

// Connect implements driver.Connector. It dials the active DSN and, when
// that fails as the type's comment says, the others in order. When every
// DSN fails it returns an error naming each (without password) and
// wrapping each failure; a dial cut short by ctx is not tried elsewhere.
func (c *Connector) Connect(ctx context.Context) (driver.Conn, error) {
	start := c.active.Load()
	n := int32(len(c.targets))
	var errs dialErrors
	for i := range n {
		idx := (start + i) % n
		t := c.targets[idx]
		conn, err := dial(ctx, t.conn)
		if err == nil {
			if idx != start && c.active.CompareAndSwap(start, idx) {
				c.switches.Add(1)
				c.logger.Warn("database: switched to another DSN",
					"dsn", t.redacted, "index", idx, "previous", c.targets[start].redacted,
					"error", errs.Error())
			}
			return &sessionConn{conn: conn, c: c, index: idx}, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", t.redacted, err))
		if ctx.Err() != nil || !IsUnavailable(err) {
			break
		}
	}
	if len(errs) == 1 {
		return nil, fmt.Errorf("db: connect to %w", errs[0])
	}
	return nil, fmt.Errorf("db: no database server answers: %w", errs)
}

// dialErrors are the failed dials of one Connect, one per DSN tried.
type dialErrors []error

// Error joins the errors on one line, for logs.
func (e dialErrors) Error() string {
	msgs := make([]string, len(e))
	for i, err := range e {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

// Unwrap lets errors.Is and errors.As see every dial's error.
func (e dialErrors) Unwrap() []error { return e }

// Driver implements driver.Connector. The driver it returns leads back to
// c, for ActiveDSN.
func (c *Connector) Driver() driver.Driver { return connectorDriver{c: c} }

// connectorDriver is what a pool's Driver method returns.
type connectorDriver struct {
	mysql.MySQLDriver
	c *Connector
}

// PoolConnector returns the Connector of a pool made by Open, OpenList or
// OpenConnector, or nil for any other pool.
func PoolConnector(pool *sql.DB) *Connector {
	if d, ok := pool.Driver().(connectorDriver); ok {
		return d.c
	}
	return nil
}

// dial opens one connection, checks that a Galera server is ready, and
// runs the session setup.
func dial(ctx context.Context, connector driver.Connector) (driver.Conn, error) {
	conn, err := connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if err := setUp(ctx, conn); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// setUp checks readiness and runs sessionSetup on a new connection.
func setUp(ctx context.Context, conn driver.Conn) error {
	execer, ok := conn.(driver.ExecerContext)
	queryer, ok2 := conn.(driver.QueryerContext)
	if !ok || !ok2 {
		return errors.New("db: driver connection cannot execute statements")
	}
	if err := checkReady(ctx, queryer); err != nil {
		return err
	}
	for _, q := range sessionSetup {
		if _, err := execer.ExecContext(ctx, q, nil); err != nil {
			return fmt.Errorf("db: session setup %q: %w", q, err)
		}
	}
	return nil
}

// checkReady returns an error wrapping ErrNotReady when the server is a
// Galera node (wsrep_on is ON) that is not ready for clients. A server
// without Galera costs one round trip: MySQL has no wsrep_on and MariaDB's
// is OFF when it runs alone.
func checkReady(ctx context.Context, q driver.QueryerContext) error {
	vars, err := show(ctx, q, "SHOW GLOBAL VARIABLES LIKE 'wsrep_on'")
	if err != nil {
		return fmt.Errorf("db: read wsrep_on: %w", err)
	}
	if !strings.EqualFold(vars["wsrep_on"], "ON") {
		return nil
	}
	status, err := show(ctx, q, "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_ready', 'wsrep_local_state', 'wsrep_local_state_comment')")
	if err != nil {
		return fmt.Errorf("db: read wsrep status: %w", err)
	}
	return wsrepReady(status)
}

// wsrepReady returns an error wrapping ErrNotReady unless the status of a
// Galera node says it serves clients.
func wsrepReady(status map[string]string) error {
	if !strings.EqualFold(status["wsrep_ready"], "ON") || status["wsrep_local_state"] != wsrepSynced {
		return fmt.Errorf("%w: wsrep_ready=%s, wsrep_local_state=%s (%s)", ErrNotReady,
			status["wsrep_ready"], status["wsrep_local_state"], status["wsrep_local_state_comment"])
	}
	return nil
}

// show runs a SHOW statement of two columns, name and value, and returns
// its rows as a map.
func show(ctx context.Context, q driver.QueryerContext, query string) (map[string]string, error) {
	rows, err := q.QueryContext(ctx, query, nil)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	dest := make([]driver.Value, len(rows.Columns()))
	if len(dest) != 2 {
		return nil, fmt.Errorf("%s: %d columns, want 2", query, len(dest))
	}
	for {
		err := rows.Next(dest)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out[strings.ToLower(asString(dest[0]))] = asString(dest[1])
	}
}

func asString(v driver.Value) string {
	switch v := v.(type) {
	case []byte:
		return string(v)
	case string:
		return v
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}

// sessionConn is a connection made by a Connector. It forwards everything
// to the driver's connection, and reports itself invalid once its DSN is no
// longer the active one, so that the pool closes it instead of reusing it.
type sessionConn struct {
	conn  driver.Conn
	c     *Connector
	index int32
}

// stale reports whether the connector has moved to another DSN.
func (s *sessionConn) stale() bool { return s.c.active.Load() != s.index }

func (s *sessionConn) Prepare(query string) (driver.Stmt, error) { return s.conn.Prepare(query) }
func (s *sessionConn) Close() error                              { return s.conn.Close() }

// Begin implements driver.Conn, which database/sql no longer calls.
func (s *sessionConn) Begin() (driver.Tx, error) {
	return s.BeginTx(context.Background(), driver.TxOptions{})
}

func (s *sessionConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return s.conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (s *sessionConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return s.conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
}

func (s *sessionConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return s.conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (s *sessionConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return s.conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (s *sessionConn) Ping(ctx context.Context) error {
	if p, ok := s.conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (s *sessionConn) CheckNamedValue(nv *driver.NamedValue) error {
	if c, ok := s.conn.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

// ResetSession implements driver.SessionResetter: the pool calls it before
// reusing the connection.
func (s *sessionConn) ResetSession(ctx context.Context) error {
	if s.stale() {
		return driver.ErrBadConn
	}
	if r, ok := s.conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

// IsValid implements driver.Validator: the pool calls it when the
// connection is returned, and closes it when it is false.
func (s *sessionConn) IsValid() bool {
	if s.stale() {
		return false
	}
	if v, ok := s.conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

// Interface guards.
var (
	_ driver.Connector          = (*Connector)(nil)
	_ driver.Conn               = (*sessionConn)(nil)
	_ driver.ConnBeginTx        = (*sessionConn)(nil)
	_ driver.ConnPrepareContext = (*sessionConn)(nil)
	_ driver.ExecerContext      = (*sessionConn)(nil)
	_ driver.QueryerContext     = (*sessionConn)(nil)
	_ driver.Pinger             = (*sessionConn)(nil)
	_ driver.NamedValueChecker  = (*sessionConn)(nil)
	_ driver.SessionResetter    = (*sessionConn)(nil)
	_ driver.Validator          = (*sessionConn)(nil)
)
