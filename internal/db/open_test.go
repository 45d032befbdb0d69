package db_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
)

// isolationVariable returns the name of the session isolation variable on
// the test server: MariaDB 10.11 has only tx_isolation, MySQL 8.4 only
// transaction_isolation.
func isolationVariable(t *testing.T, pool *sql.DB) string {
	t.Helper()
	var v string
	err := pool.QueryRow("SELECT @@SESSION.transaction_isolation").Scan(&v)
	var me *mysql.MySQLError
	switch {
	case err == nil:
		return "transaction_isolation"
	case errors.As(err, &me) && me.Number == 1193: // unknown system variable
		return "tx_isolation"
	default:
		t.Fatal(err)
		return ""
	}
}

// repeatableReadDSN returns a DSN whose own parameters ask for REPEATABLE
// READ and another time zone, which Open must override.
func repeatableReadDSN(t *testing.T, pool *sql.DB, dsn string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Params = map[string]string{
		isolationVariable(t, pool): "'REPEATABLE-READ'",
		"time_zone":                "'+05:00'",
	}
	return cfg.FormatDSN()
}

func TestOpen_OverridesSessionZoneAndIsolation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.NewEmpty(t)
	plain := open(t, dsn)
	variable := isolationVariable(t, plain)

	pool := open(t, repeatableReadDSN(t, plain, dsn))
	pool.SetMaxOpenConns(3)
	// Check several connections, not just the first.
	conns := make([]*sql.Conn, 3)
	for i := range conns {
		c, err := pool.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
		var zone, isolation string
		if err := c.QueryRowContext(ctx, "SELECT @@SESSION.time_zone, @@SESSION."+variable).Scan(&zone, &isolation); err != nil {
			t.Fatal(err)
		}
		if zone != "+00:00" || isolation != "READ-COMMITTED" {
			t.Errorf("connection %d: time_zone %s, isolation %s; want +00:00, READ-COMMITTED", i, zone, isolation)
		}
	}
}

func TestOpen_ScansTimesAsUTC(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	if _, err := pool.Exec("CREATE TABLE times (id INT PRIMARY KEY, at DATETIME(6) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	now := db.Now()
	if _, err := pool.Exec("INSERT INTO times VALUES (1, ?)", now); err != nil {
		t.Fatal(err)
	}
	var got, server time.Time
	if err := pool.QueryRow("SELECT at, NOW(6) FROM times WHERE id = 1").Scan(&got, &server); err != nil {
		t.Fatal(err)
	}
	if !got.Equal(now) || got.Location() != time.UTC {
		t.Errorf("read back %v, wrote %v", got, now)
	}
	// NOW() follows the session time zone, which must be UTC.
	if d := server.Sub(time.Now()); d < -time.Minute || d > time.Minute {
		t.Errorf("server NOW(6) = %v is off by %v: session time zone is not UTC", server, d)
	}
}

func TestOpen_ErrorsHideThePassword(t *testing.T) {
	t.Parallel()
	const secret = "hunter2-s3cret"
	cfg, err := mysql.ParseDSN(testdb.NewEmpty(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.User = "orbit_nobody"
	cfg.Passwd = secret
	wrongPassword := cfg.FormatDSN()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()

	for name, dsn := range map[string]string{
		"AccessDenied": wrongPassword,
		"NoServer":     "root:" + secret + "@tcp(127.0.0.1:" + closedPort + ")/orbit",
		"Malformed":    "root:" + secret + "@tcp(127.0.0.1:3306/orbit",
		"BadParam":     "root:" + secret + "@tcp(127.0.0.1:3306)/orbit?parseTime=maybe",
		"BadEscape":    "root:" + secret + "@tcp(127.0.0.1:3306)/%zz" + url.PathEscape(secret),
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			pool, err := db.Open(ctx, dsn)
			if err == nil {
				pool.Close()
				t.Fatal("Open succeeded")
			}
			t.Log(err)
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error shows the password: %v", err)
			}
			if !strings.HasPrefix(err.Error(), "db: ") {
				t.Errorf("error does not say where it comes from: %v", err)
			}
		})
	}
}

func TestRedactDSN(t *testing.T) {
	t.Parallel()
	for dsn, want := range map[string]string{
		"orbit:pw@tcp(db:3306)/orbit?parseTime=true": "orbit:xxxxx@tcp(db:3306)/orbit?parseTime=true",
		"root@tcp(127.0.0.1:3306)/x":                 "root@tcp(127.0.0.1:3306)/x",
		"no slash":                                   "(invalid DSN)",
	} {
		if got := db.RedactDSN(dsn); got != want {
			t.Errorf("RedactDSN(%q) = %q, want %q", dsn, got, want)
		}
	}
}

// open opens dsn with db.Open and closes the pool when the test ends.
func open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := db.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	return pool
}
