package db_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/mysqld"
)

// failoverPassword is the password of the user the failover tests connect
// as; no error or log line may show it.
const failoverPassword = "N8-s3cret-pw"

// failoverPair is two standalone servers, started once per test binary by
// the first failover test: "a" plays the primary, "b" the second node. The
// tests that use them stop and start them, so they do not run in parallel
// with each other, and each leaves both running.
var failoverPair struct {
	once    sync.Once
	dir     string
	servers [2]*mysqld.Server
	err     error
}

// failoverServers returns the two servers, starting them on first use.
func failoverServers(t *testing.T) (a, b *mysqld.Server) {
	t.Helper()
	p := &failoverPair
	p.once.Do(func() { p.err = startFailoverPair() })
	if p.err != nil {
		t.Fatal(p.err)
	}
	t.Cleanup(func() {
		// Bring back whatever the test stopped; Restart of a running
		// server would cost a stop and a start, so only dead ones.
		for _, s := range p.servers {
			if !serverAnswers(s) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				err := s.Restart(ctx)
				cancel()
				if err != nil {
					t.Errorf("restart %d: %v", s.Port(), err)
				}
			}
		}
	})
	return p.servers[0], p.servers[1]
}

// startFailoverPair starts both servers side by side and gives each a
// database "orbit" and a user with a password.
func startFailoverPair() error {
	p := &failoverPair
	dir, err := os.MkdirTemp("", "orbit-db-failover-")
	if err != nil {
		return err
	}
	p.dir = dir
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range p.servers {
		wg.Go(func() {
			s, err := mysqld.Start(ctx, mysqld.Options{DataDir: filepath.Join(dir, fmt.Sprint(i))})
			if err != nil {
				errs[i] = err
				return
			}
			p.servers[i] = s
			errs[i] = prepareFailoverServer(ctx, s)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func prepareFailoverServer(ctx context.Context, s *mysqld.Server) error {
	pool, err := sql.Open("mysql", s.DSN(""))
	if err != nil {
		return err
	}
	defer pool.Close()
	for _, q := range []string{
		"CREATE DATABASE orbit",
		"CREATE USER 'orbit'@'%' IDENTIFIED BY '" + failoverPassword + "'",
		"GRANT ALL ON orbit.* TO 'orbit'@'%'",
	} {
		if _, err := pool.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// stopFailoverPair stops the servers, if a test started them, and removes
// their files. TestMain calls it.
func stopFailoverPair() error {
	p := &failoverPair
	var errs []error
	for _, s := range p.servers {
		if s != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			errs = append(errs, s.Stop(ctx))
			cancel()
		}
	}
	if p.dir != "" {
		errs = append(errs, os.RemoveAll(p.dir))
	}
	return errors.Join(errs...)
}

// serverAnswers reports whether s accepts connections.
func serverAnswers(s *mysqld.Server) bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.Port()), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// failoverDSN is the DSN of the test user's database on s.
func failoverDSN(s *mysqld.Server) string {
	return fmt.Sprintf("orbit:%s@tcp(127.0.0.1:%d)/orbit", failoverPassword, s.Port())
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// openFailover opens a pool over the DSNs of servers, logging to the
// returned buffer; the pool is closed when the test ends.
func openFailover(t *testing.T, servers ...*mysqld.Server) (*sql.DB, *syncBuffer) {
	t.Helper()
	var dsns []string
	for _, s := range servers {
		dsns = append(dsns, failoverDSN(s))
	}
	logs := &syncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := db.OpenList(ctx, dsns, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	return pool, logs
}

// portOf returns the port of the server that answers on a new connection
// of pool; other connections are held meanwhile so that it is a new one.
func portOf(t *testing.T, pool *sql.DB) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var port int
	if err := pool.QueryRowContext(ctx, "SELECT @@port").Scan(&port); err != nil {
		t.Fatalf("query: %v", err)
	}
	return port
}

// newConnPorts opens n new connections of pool at once and returns the
// port each one reached.
func newConnPorts(t *testing.T, pool *sql.DB, n int) []int {
	t.Helper()
	// Idle connections are handed out first: take them too, then n more.
	before := pool.Stats().OpenConnections
	return takePorts(t, pool, before+n)[before:]
}

// takePorts takes n connections of pool at once, idle ones first, and
// returns the port each one is connected to.
func takePorts(t *testing.T, pool *sql.DB, n int) []int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var conns []*sql.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var ports []int
	for range n {
		c, err := pool.Conn(ctx)
		if err != nil {
			t.Fatalf("conn: %v", err)
		}
		conns = append(conns, c)
		var port int
		if err := c.QueryRowContext(ctx, "SELECT @@port").Scan(&port); err != nil {
			t.Fatalf("query: %v", err)
		}
		ports = append(ports, port)
	}
	return ports
}

func checkNoPassword(t *testing.T, what, text string) {
	t.Helper()
	if strings.Contains(text, failoverPassword) {
		t.Errorf("%s shows the password: %s", what, text)
	}
}

func TestN8_FailoverDSNUsedWhenPrimaryDown(t *testing.T) {
	a, b := failoverServers(t)
	pool, logs := openFailover(t, a, b)
	if got := portOf(t, pool); got != a.Port() {
		t.Fatalf("before the failure: port %d, want the primary's %d", got, a.Port())
	}
	if _, err := pool.Exec("CREATE TABLE IF NOT EXISTS n8 (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}

	a.Kill()
	// The idle connection to the dead primary is discarded and the pool
	// dials again, which moves to the second DSN.
	if got := portOf(t, pool); got != b.Port() {
		t.Fatalf("after the primary died: port %d, want the second's %d", got, b.Port())
	}
	err := db.Tx(context.Background(), pool, func(tx *sql.Tx) error {
		_, err := tx.Exec("CREATE TABLE IF NOT EXISTS n8 (id INT PRIMARY KEY)")
		return err
	})
	if err != nil {
		t.Fatalf("transaction through the second DSN: %v", err)
	}
	c := db.PoolConnector(pool)
	if c == nil || c.Active() != 1 || c.Len() != 2 || c.Switches() != 1 {
		t.Fatalf("connector: %+v", c)
	}
	if want := db.RedactDSN(failoverDSN(b)); c.ActiveDSN() != want {
		t.Errorf("ActiveDSN = %s, want %s", c.ActiveDSN(), want)
	}

	out := logs.String()
	t.Log(out)
	if n := strings.Count(out, "switched to another DSN"); n != 1 {
		t.Errorf("%d switch warnings, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, fmt.Sprintf("127.0.0.1:%d", b.Port())) {
		t.Errorf("warning does not name the new DSN:\n%s", out)
	}
	checkNoPassword(t, "log", out)
}

func TestN8_StaysOnFailoverWhilePrimaryReturns(t *testing.T) {
	a, b := failoverServers(t)
	pool, logs := openFailover(t, a, b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if got := portOf(t, pool); got != b.Port() {
		t.Fatalf("primary stopped: port %d, want the second's %d", got, b.Port())
	}

	if err := a.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	for i, port := range newConnPorts(t, pool, 4) {
		if port != b.Port() {
			t.Errorf("new connection %d after the primary's return went to %d, want the second's %d", i, port, b.Port())
		}
	}

	// Only a failed dial to the second moves the pool, on to the next DSN
	// after it, wrapping around to the primary.
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if got := portOf(t, pool); got != a.Port() {
		t.Fatalf("second stopped: port %d, want the primary's %d", got, a.Port())
	}
	if got := db.PoolConnector(pool).Active(); got != 0 {
		t.Errorf("Active = %d, want 0", got)
	}
	out := logs.String()
	t.Log(out)
	if n := strings.Count(out, "switched to another DSN"); n != 2 {
		t.Errorf("%d switch warnings, want 2:\n%s", n, out)
	}
	checkNoPassword(t, "log", out)
}

func TestN8_IdleConnectionsToFormerDSNClosed(t *testing.T) {
	a, b := failoverServers(t)
	pool, logs := openFailover(t, a, b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Live connections to the primary stay idle in the pool; there are ten
	// or more because max_connections cannot go below 10.
	for _, port := range newConnPorts(t, pool, 10) {
		if port != a.Port() {
			t.Fatalf("port %d, want the primary's %d", port, a.Port())
		}
	}
	idle := pool.Stats().Idle

	// The primary refuses new connections (1040) while it keeps the old
	// ones: the pool moves to the second DSN.
	admin, err := sql.Open("mysql", a.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	admin.SetMaxOpenConns(1)
	onPrimary := func() int {
		var n int
		q := "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'orbit'"
		if err := admin.QueryRowContext(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var old string
	if err := admin.QueryRowContext(ctx, "SELECT @@GLOBAL.max_connections").Scan(&old); err != nil {
		t.Fatal(err)
	}
	// root (SUPER) may still connect above the limit; the test user not.
	if _, err := admin.ExecContext(ctx, fmt.Sprintf("SET GLOBAL max_connections = %d", onPrimary())); err != nil {
		t.Fatal(err)
	}
	defer admin.Exec("SET GLOBAL max_connections = " + old)

	ports := newConnPorts(t, pool, 1)
	if ports[0] != b.Port() {
		t.Fatalf("with the primary full: port %d, want the second's %d", ports[0], b.Port())
	}
	// The idle connections to the primary are closed rather than reused.
	for i, port := range takePorts(t, pool, idle+1) {
		if port != b.Port() {
			t.Errorf("connection %d reused on the former DSN %d", i, port)
		}
	}
	// The server notices closed connections a moment later.
	deadline := time.Now().Add(10 * time.Second)
	for onPrimary() != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := onPrimary(); n != 0 {
		t.Errorf("%d connections of the pool left on the former DSN", n)
	}
	t.Log(logs.String())
}

func TestN8_AllDSNsDownErrors(t *testing.T) {
	t.Parallel()
	var dsns []string
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dsns = append(dsns, fmt.Sprintf("orbit:%s@tcp(%s)/orbit", failoverPassword, l.Addr()))
		l.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	logs := &syncBuffer{}
	pool, err := db.OpenList(ctx, dsns, slog.New(slog.NewTextHandler(logs, nil)))
	if err == nil {
		pool.Close()
		t.Fatal("OpenList succeeded with no server")
	}
	t.Log(err)
	checkNoPassword(t, "error", err.Error())
	for _, dsn := range dsns {
		if !strings.Contains(err.Error(), db.RedactDSN(dsn)) {
			t.Errorf("error does not name %s: %v", db.RedactDSN(dsn), err)
		}
	}
	if !strings.HasPrefix(err.Error(), "db: ") || !strings.Contains(err.Error(), "no database server answers") {
		t.Errorf("error does not say what failed: %v", err)
	}
	if !db.IsUnavailable(err) {
		t.Errorf("IsUnavailable(%v) = false", err)
	}
	if logs.String() != "" {
		t.Errorf("log without a switch: %s", logs.String())
	}
}

func TestN8_ParseErrorNamesIndexWithoutPassword(t *testing.T) {
	t.Parallel()
	_, err := db.OpenList(context.Background(), []string{
		"orbit:" + failoverPassword + "@tcp(127.0.0.1:3306)/orbit",
		"orbit:" + failoverPassword + "@tcp(127.0.0.1:3306/orbit",
	}, nil)
	if err == nil {
		t.Fatal("OpenList accepted a malformed DSN")
	}
	checkNoPassword(t, "error", err.Error())
	if !strings.Contains(err.Error(), "DSN 1") {
		t.Errorf("error does not name the DSN's index: %v", err)
	}
}

func TestN8_PoolConnectorOfForeignPool(t *testing.T) {
	t.Parallel()
	cfg := mysql.NewConfig()
	cfg.Addr = "127.0.0.1:1"
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pool := sql.OpenDB(conn)
	defer pool.Close()
	if c := db.PoolConnector(pool); c != nil {
		t.Errorf("PoolConnector of a plain pool = %v, want nil", c)
	}
}
