package mysqld

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if pristineDir != "" {
		os.RemoveAll(filepath.Dir(pristineDir))
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

var (
	pristineOnce sync.Once
	pristineDir  string
	pristineErr  error
)

// initialisedDataDir returns a new copy of a data directory initialised once
// per test binary: copying takes a tenth of a second, initialising seconds.
func initialisedDataDir(t *testing.T) string {
	t.Helper()
	pristineOnce.Do(func() {
		pristineDir, pristineErr = os.MkdirTemp("", "orbit-mysqld-test-")
		if pristineErr != nil {
			return
		}
		bin, err := FindServer()
		if err != nil {
			pristineErr = err
			return
		}
		fl, err := detectFlavor(bin)
		if err != nil {
			pristineErr = err
			return
		}
		pristineDir = filepath.Join(pristineDir, "data")
		pristineErr = ensureDataDir(context.Background(), bin, fl, pristineDir, runAsUser(""))
	})
	if pristineErr != nil {
		t.Fatal(pristineErr)
	}
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.CopyFS(dir, os.DirFS(pristineDir)); err != nil {
		t.Fatal(err)
	}
	return dir
}

// setup starts a server and stops it when the test ends. Without a DataDir,
// it uses a copy of an initialised one.
func setup(t *testing.T, opts Options) *Server {
	t.Helper()
	if opts.DataDir == "" {
		opts.DataDir = initialisedDataDir(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return s
}

// open returns a pool on the server's database, closed when the test ends.
func open(t *testing.T, s *Server, database string) *sql.DB {
	t.Helper()
	pool, err := sql.Open("mysql", s.DSN(database))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	return pool
}

func queryString(t *testing.T, pool *sql.DB, q string) string {
	t.Helper()
	var v string
	if err := pool.QueryRow(q).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}

func TestFindServer_FindsInstalledServer(t *testing.T) {
	path, err := FindServer()
	if err != nil {
		t.Fatal(err)
	}
	if base := filepath.Base(path); base != "mariadbd" && base != "mysqld" {
		t.Errorf("FindServer = %s, want a mariadbd or mysqld binary", path)
	}
}

func TestFindServer_MissingSaysWhatToInstall(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := findServer([]string{t.TempDir()})
	if err == nil {
		t.Fatal("findServer found a server in empty directories")
	}
	for _, want := range []string{"apt-get install -y mariadb-server", "ORBIT_TEST_MYSQL_DSN"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestStart_FreshDataDirServesRootOverTCP(t *testing.T) {
	t.Parallel()
	s := setup(t, Options{DataDir: filepath.Join(t.TempDir(), "data")})
	pool := open(t, s, "")

	if got := queryString(t, pool, "SELECT @@port"); got != strconv.Itoa(s.Port()) {
		t.Errorf("@@port = %s, want %d", got, s.Port())
	}
	for q, want := range map[string]string{
		"SELECT @@bind_address":                   "127.0.0.1",
		"SELECT @@innodb_flush_log_at_trx_commit": "2",
		"SELECT @@log_bin":                        "0",
		"SELECT @@character_set_server":           "utf8mb4",
		"SELECT @@max_connections":                "500",
	} {
		if got := queryString(t, pool, q); got != want {
			t.Errorf("%s = %s, want %s", q, got, want)
		}
	}
	if !strings.HasPrefix(s.DSN("x"), fmt.Sprintf("root@tcp(127.0.0.1:%d)/x?", s.Port())) {
		t.Errorf("DSN = %s", s.DSN("x"))
	}
}

func TestStop_IsIdempotent(t *testing.T) {
	t.Parallel()
	s := setup(t, Options{})
	ctx := context.Background()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port())), time.Second); err == nil {
		t.Error("server still accepts connections after Stop")
	}
}

func TestStart_ReusesDataDir(t *testing.T) {
	t.Parallel()
	dir := initialisedDataDir(t)
	s := setup(t, Options{DataDir: dir, Durable: true})
	pool := open(t, s, "")
	if got := queryString(t, pool, "SELECT @@innodb_flush_log_at_trx_commit"); got != "1" {
		t.Errorf("durable server has innodb_flush_log_at_trx_commit = %s, want 1", got)
	}
	for _, q := range []string{
		"CREATE DATABASE kept",
		"CREATE TABLE kept.t (id INT PRIMARY KEY)",
		"INSERT INTO kept.t VALUES (7)",
	} {
		if _, err := pool.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	pool.Close()
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}

	s2 := setup(t, Options{DataDir: dir})
	if got := queryString(t, open(t, s2, "kept"), "SELECT id FROM t"); got != "7" {
		t.Errorf("row after restart = %s, want 7", got)
	}
}

func TestKill_RestartRecoversCommittedRows(t *testing.T) {
	t.Parallel()
	s := setup(t, Options{})
	pool := open(t, s, "")
	for _, q := range []string{
		"CREATE DATABASE k",
		"CREATE TABLE k.t (id INT PRIMARY KEY)",
		"INSERT INTO k.t VALUES (1)",
	} {
		if _, err := pool.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	port := s.Port()
	s.Kill()
	s.Kill() // a second Kill is harmless
	if err := pool.Ping(); err == nil {
		t.Fatal("ping succeeded after Kill")
	}
	if err := s.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s.Port() != port {
		t.Errorf("port after Restart = %d, want %d", s.Port(), port)
	}
	if got := queryString(t, pool, "SELECT COUNT(*) FROM k.t"); got != "1" {
		t.Errorf("rows after crash and restart = %s, want 1", got)
	}
	// Restart of a running server stops it first.
	if err := s.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, pool, "SELECT COUNT(*) FROM k.t"); got != "1" {
		t.Errorf("rows after second restart = %s, want 1", got)
	}
}

func TestStart_FailureQuotesErrorLog(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port

	_, err = Start(context.Background(), Options{DataDir: initialisedDataDir(t), Port: port})
	if err == nil {
		t.Fatal("Start succeeded on a port in use")
	}
	if !strings.Contains(err.Error(), "last lines of") || !strings.Contains(err.Error(), "Address already in use") {
		t.Errorf("error does not quote the error log:\n%v", err)
	}
}

func TestStart_LongDataDirPathPutsSocketElsewhere(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60), "data")
	if err := os.CopyFS(dir, os.DirFS(initialisedDataDir(t))); err != nil {
		t.Fatal(err)
	}
	s := setup(t, Options{DataDir: dir})
	if len(filepath.Join(dir, "mysqld.sock")) <= maxSocketPath {
		t.Fatalf("test path too short: %d bytes", len(dir))
	}
	if s.sockDir == "" || len(s.socket) > maxSocketPath {
		t.Fatalf("socket = %s, want a short path in a temporary directory", s.socket)
	}
	if got := queryString(t, open(t, s, ""), "SELECT @@socket"); got != s.socket {
		t.Errorf("@@socket = %s, want %s", got, s.socket)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.sockDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket directory left after Stop: %v", err)
	}
}

func TestStart_RefusesSecondServerOnDataDir(t *testing.T) {
	t.Parallel()
	dir := initialisedDataDir(t)
	s := setup(t, Options{DataDir: dir})
	for _, port := range []int{0, s.Port()} {
		s2, err := Start(context.Background(), Options{DataDir: dir, Port: port})
		if err == nil {
			s2.Stop(context.Background())
			t.Fatalf("second server on port %d started", port)
		}
		if !strings.Contains(err.Error(), "already runs on") {
			t.Errorf("second server on port %d: %v", port, err)
		}
	}
	// The first server is unharmed.
	if got := queryString(t, open(t, s, ""), "SELECT 1"); got != "1" {
		t.Errorf("SELECT 1 = %s", got)
	}
}

func TestStart_RejectsForeignNonEmptyDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Start(context.Background(), Options{DataDir: dir})
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("Start on a non-empty foreign directory: %v", err)
	}
}

// helperEnv makes the test binary run TestHelperServer as a parent process
// for TestServerDiesWithParent.
const helperEnv = "ORBIT_MYSQLD_TEST_HELPER_DIR"

// TestHelperServer is not a test: run by TestServerDiesWithParent in a child
// test binary, it starts a server, prints its process ID and waits to be
// killed.
func TestHelperServer(t *testing.T) {
	dir := os.Getenv(helperEnv)
	if dir == "" {
		return
	}
	s, err := Start(context.Background(), Options{DataDir: dir})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	fmt.Println("PID", s.proc.cmd.Process.Pid)
	time.Sleep(time.Minute)
	os.Exit(1)
}

func TestServerDiesWithParent(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperServer$")
	cmd.Env = append(os.Environ(), helperEnv+"="+initialisedDataDir(t))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "PID ") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper said %q: %v", line, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "PID ")))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Process.Kill()
	cmd.Wait()

	deadline := time.Now().Add(10 * time.Second)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("server %d still runs after its parent was killed", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processAlive reports whether pid runs; a zombie waiting to be reaped does
// not count.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
