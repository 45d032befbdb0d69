package testdb

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/migrate"
	"github.com/orbitrun/orbit/internal/mysqld"
)

// privateDatabase is the one database of a private server.
const privateDatabase = "orbit"

// Server is a database server of one test's own, for fault tests that stop
// the database under a running Orbit and start it again: Stop, Kill and
// Restart act on it alone, whatever the other tests of the binary do.
type Server struct {
	*mysqld.Server
	// DSN names a database on it that holds the platform schema.
	DSN string
}

// NewServer starts a server of the test's own in a new temporary directory,
// creates a migrated database on it, and stops the server and removes its
// files when the test ends. Initialising the data directory takes a few
// seconds, so tests that only need a database use New. It needs a server
// binary even when ORBIT_TEST_MYSQL_DSN is set, since a shared server
// cannot be stopped.
func NewServer(t testing.TB) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	removeAbandonedDirs()
	dir, err := os.MkdirTemp("", tempDirPrefix)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("testdb: %v", err)
	}
	t.Cleanup(func() {
		os.RemoveAll(dir)
		lock.Close()
	})
	srv, err := mysqld.Start(ctx, mysqld.Options{DataDir: filepath.Join(dir, "data")})
	if err != nil {
		t.Fatalf("testdb: start a private database server: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if err := srv.Stop(ctx); err != nil {
			t.Errorf("testdb: stop the private server: %v", err)
		}
	})

	admin, err := db.Open(ctx, srv.DSN(""))
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+privateDatabase+"` "+charset); err != nil {
		t.Fatalf("testdb: create database: %v", err)
	}
	dsn := srv.DSN(privateDatabase)
	pool, err := db.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	defer pool.Close()
	set, err := schema()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.Up(ctx, pool, set); err != nil {
		t.Fatalf("testdb: migrate: %v", err)
	}
	return &Server{Server: srv, DSN: dsn}
}
