// Package mysqld starts and stops a private MariaDB or MySQL server process.
//
// The test harness starts one throwaway server per test binary with it, and
// orbit dev keeps one in a data directory under .local. The server listens on
// 127.0.0.1 and on a unix socket, and root has no password: it is meant for
// a developer's machine and for tests, never for production.
package mysqld

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

const (
	// DefaultStartTimeout bounds how long Start and Restart wait for the
	// server to accept connections when Options.StartTimeout is zero.
	DefaultStartTimeout = 60 * time.Second

	// stopTimeout bounds how long Stop waits after SIGTERM before it sends
	// SIGKILL.
	stopTimeout = 30 * time.Second

	// maxSocketPath is the longest unix socket path the kernel accepts
	// (sun_path holds 108 bytes including the terminating NUL).
	maxSocketPath = 107

	// portAttempts is how many free ports Start tries when Options.Port is 0
	// and another process takes the chosen port first.
	portAttempts = 3

	innodbBufferPoolSize  = "128M"
	innodbLogFileSize     = "48M"
	innodbRedoLogCapacity = "100M"
	maxConnections        = "500"
)

// Options configures Start.
type Options struct {
	// DataDir holds the server's data. Start initialises it when it is
	// missing or empty and reuses it when it already holds a data directory,
	// so data survives between runs.
	DataDir string

	// Port is the TCP port on 127.0.0.1. Zero picks a free port.
	Port int

	// Durable makes every commit reach the disk before it is acknowledged.
	// When false, the redo log is flushed about once a second
	// (innodb_flush_log_at_trx_commit=2, sync_binlog=0): a crash of the
	// server loses nothing, a crash of the machine may lose the last second.
	// Tests run with false because it is much faster.
	Durable bool

	// LogFile receives the server's error log. Empty means mysqld.log in
	// DataDir.
	LogFile string

	// Args are more server options, appended to the ones Start sets (a
	// later option overrides an earlier one). The Galera cluster of
	// internal/testkit/galera passes its wsrep options here.
	Args []string

	// NoInit leaves an empty or missing DataDir uninitialised: the server
	// receives its data by a state transfer, as a node joining a Galera
	// cluster does. Start creates the directory.
	NoInit bool

	// User is the system user the server runs as when this process runs
	// as root; empty means root. Start gives it the data directory, the
	// temporary and socket directories and the log file; the directory
	// holding DataDir must let it in. Ignored when not running as root.
	// Galera nodes need a user other than root: the rsync daemon of a state
	// transfer started by root switches to nobody.
	User string

	// StartTimeout bounds how long Start and Restart wait for the server
	// to accept connections; zero means DefaultStartTimeout. A Galera
	// joiner waits for its state transfer, after the transfers of the
	// joiners before it.
	StartTimeout time.Duration
}

// Server is a running server process started by Start. Its methods are safe
// for concurrent use.
type Server struct {
	bin     string
	flavor  flavor
	dataDir string
	logFile string
	socket  string
	sockDir string // temporary directory holding the socket; empty when it is in dataDir
	durable bool
	port    int
	extra   []string      // Options.Args
	user    string        // --user value; empty when not running as root
	ready   time.Duration // Options.StartTimeout or DefaultStartTimeout

	mu   sync.Mutex // serialises Stop, Kill and Restart
	proc *process   // nil while the server is not running
}

// process is one run of the server binary.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // result of Wait, set before done is closed
}

// kill sends SIGKILL and waits until the process has exited.
func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// portInUseError marks a start that failed because another process took
// the TCP port.
type portInUseError struct{ err error }

func (e portInUseError) Error() string { return e.err.Error() }
func (e portInUseError) Unwrap() error { return e.err }

// Start initialises opts.DataDir if needed, starts the server and waits until
// it accepts connections from root over TCP on 127.0.0.1, for at most
// opts.StartTimeout (60 seconds by default) or until ctx ends. Initialising takes a few seconds; reusing a data
// directory about half a second. When the server fails to start, the error
// includes the last lines of its error log. The caller must call Stop.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.DataDir == "" {
		return nil, errors.New("mysqld: Options.DataDir is empty")
	}
	bin, err := FindServer()
	if err != nil {
		return nil, err
	}
	fl, err := detectFlavor(bin)
	if err != nil {
		return nil, err
	}
	dataDir, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("mysqld: data dir: %w", err)
	}
	runAs := runAsUser(opts.User)
	if opts.NoInit {
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return nil, fmt.Errorf("mysqld: data dir: %w", err)
		}
		if err := chownTo(runAs, dataDir); err != nil {
			return nil, err
		}
	} else if err := ensureDataDir(ctx, bin, fl, dataDir, runAs); err != nil {
		return nil, err
	}

	s := &Server{
		bin:     bin,
		flavor:  fl,
		dataDir: dataDir,
		logFile: opts.LogFile,
		durable: opts.Durable,
		port:    opts.Port,
		extra:   append([]string(nil), opts.Args...),
		user:    runAs,
		ready:   cmp.Or(opts.StartTimeout, DefaultStartTimeout),
	}
	if s.logFile == "" {
		s.logFile = filepath.Join(dataDir, "mysqld.log")
	}
	if s.logFile, err = filepath.Abs(s.logFile); err != nil {
		return nil, fmt.Errorf("mysqld: log file: %w", err)
	}
	s.socket = filepath.Join(dataDir, "mysqld.sock")
	if len(s.socket) > maxSocketPath {
		dir, err := os.MkdirTemp("", "orbit-mysqld-")
		if err != nil {
			return nil, fmt.Errorf("mysqld: socket dir: %w", err)
		}
		s.sockDir = dir
		s.socket = filepath.Join(dir, "mysqld.sock")
	}

	for attempt := 1; ; attempt++ {
		if opts.Port == 0 {
			if s.port, err = freePort(); err != nil {
				s.removeSocketDir()
				return nil, err
			}
		}
		err = s.start(ctx)
		if err == nil {
			return s, nil
		}
		if opts.Port != 0 || attempt == portAttempts || !errors.As(err, &portInUseError{}) {
			s.removeSocketDir()
			return nil, err
		}
	}
}

// DSN returns a go-sql-driver/mysql DSN for root over TCP to database, which
// may be empty. internal/db.Open adds the session settings Orbit relies on.
func (s *Server) DSN(database string) string {
	return fmt.Sprintf("root@tcp(127.0.0.1:%d)/%s?parseTime=true&loc=UTC", s.port, database)
}

// Port returns the TCP port the server listens on.
func (s *Server) Port() int {
	return s.port
}

// Stop shuts the server down with SIGTERM and waits for it to exit. If it
// has not exited after 30 seconds or when ctx ends, Stop kills it and says
// so. Stop is idempotent and safe after Kill; Restart may follow it.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.stopLocked(ctx)
	s.removeSocketDir()
	return err
}

// Kill ends the server with SIGKILL, as a crash would, and waits until the
// process has exited. InnoDB recovers on the next start. It is meant for
// fault tests; Restart brings the server back.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.kill()
		s.proc = nil
	}
}

// Restart stops the server if it is running and starts it again on the same
// data directory and port, waiting as Start does. Connections to the old
// process are lost.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stopLocked(ctx); err != nil {
		return err
	}
	return s.start(ctx)
}

// stopLocked stops the running process, if any. s.mu must be held.
func (s *Server) stopLocked(ctx context.Context) error {
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
		p.kill()
		return fmt.Errorf("mysqld: server did not stop within %s; killed it", stopTimeout)
	case <-ctx.Done():
		p.kill()
		return fmt.Errorf("mysqld: stop: %w; killed the server", ctx.Err())
	}
}

// start runs the server binary and waits until it is ready. On failure the
// process is killed and the error quotes the new part of the error log.
func (s *Server) start(ctx context.Context) error {
	if pid := s.runningServer(); pid != 0 {
		return fmt.Errorf("mysqld: another server (pid %d) already runs on %s; stop it first", pid, s.dataDir)
	}
	if err := os.MkdirAll(filepath.Dir(s.socket), 0o700); err != nil {
		return fmt.Errorf("mysqld: socket dir: %w", err)
	}
	if err := os.MkdirAll(s.tmpDir(), 0o700); err != nil {
		return fmt.Errorf("mysqld: tmp dir: %w", err)
	}
	logf, err := os.OpenFile(s.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("mysqld: log file: %w", err)
	}
	if err := chownTo(s.user, filepath.Dir(s.socket), s.tmpDir(), s.logFile); err != nil {
		logf.Close()
		return err
	}
	offset, err := logf.Seek(0, io.SeekEnd)
	if err != nil {
		logf.Close()
		return fmt.Errorf("mysqld: log file: %w", err)
	}

	// The server outlives ctx, so it is not tied to it.
	cmd := exec.Command(s.bin, s.args()...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	logf.Close() // the child has its own descriptor
	if err != nil {
		return fmt.Errorf("mysqld: start %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()

	if err := s.waitReady(ctx, p); err != nil {
		p.kill()
		logTail := s.logTail(offset)
		err = fmt.Errorf("%w\n--- last lines of %s ---\n%s", err, s.logFile, logTail)
		if strings.Contains(logTail, "Address already in use") {
			return portInUseError{err}
		}
		return err
	}
	s.proc = p
	return nil
}

// args returns the server's command line.
func (s *Server) args() []string {
	args := []string{
		"--no-defaults",
		"--datadir=" + s.dataDir,
		"--tmpdir=" + s.tmpDir(),
		"--socket=" + s.socket,
		"--port=" + strconv.Itoa(s.port),
		"--bind-address=127.0.0.1",
		"--skip-name-resolve",
		"--pid-file=" + s.pidFile(),
		"--log-error=" + s.logFile,
		"--skip-log-bin",
		"--loose-performance-schema=OFF",
		"--innodb-buffer-pool-size=" + innodbBufferPoolSize,
		"--max-connections=" + maxConnections,
		"--character-set-server=utf8mb4",
		"--collation-server=utf8mb4_unicode_ci",
		"--transaction-isolation=READ-COMMITTED",
	}
	if s.user != "" {
		args = append(args, "--user="+s.user)
	}
	switch s.flavor {
	case flavorMariaDB:
		args = append(args, "--innodb-log-file-size="+innodbLogFileSize)
	case flavorMySQL:
		args = append(args,
			"--innodb-redo-log-capacity="+innodbRedoLogCapacity,
			"--mysqlx=OFF",
			"--secure-file-priv=NULL",
		)
	}
	if s.durable {
		args = append(args, "--innodb-flush-log-at-trx-commit=1", "--sync-binlog=1")
	} else {
		args = append(args, "--innodb-flush-log-at-trx-commit=2", "--sync-binlog=0")
	}
	return append(args, s.extra...)
}

// waitReady waits until the server answers on its unix socket, lets root
// connect over TCP from 127.0.0.1 (MySQL's --initialize-insecure creates
// root@localhost only), and checks that it answers over TCP.
func (s *Server) waitReady(ctx context.Context, p *process) error {
	ctx, cancel := context.WithTimeout(ctx, s.ready)
	defer cancel()

	sock := QuietDB("unix", s.socket)
	defer sock.Close()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		pingCtx, cancelPing := context.WithTimeout(ctx, 2*time.Second)
		err := sock.PingContext(pingCtx)
		cancelPing()
		// The server writes its pid file before it accepts connections. A
		// server that answers while the pid file names another process is
		// an older server on the same data directory; ours will fail to
		// lock the data files and exit.
		if err == nil && s.pidFileHolds(p.cmd.Process.Pid) {
			break
		}
		select {
		case <-p.done:
			return fmt.Errorf("mysqld: server exited while starting: %v", p.err)
		case <-ctx.Done():
			return fmt.Errorf("mysqld: server not ready: %w (last error: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}

	for _, q := range []string{
		"CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'",
		"GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION",
	} {
		if err := execWhenReady(ctx, sock, p, q); err != nil {
			return fmt.Errorf("mysqld: allow root over TCP: %w", err)
		}
	}

	tcp := QuietDB("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)))
	defer tcp.Close()
	if err := tcp.PingContext(ctx); err != nil {
		return fmt.Errorf("mysqld: ping over TCP: %w", err)
	}
	return nil
}

// execWhenReady runs q, retrying while the server refuses statements with
// 1047 (ER_UNKNOWN_COM_ERROR): a Galera node answers so until it has caught
// up with its cluster.
func execWhenReady(ctx context.Context, db *sql.DB, p *process, q string) error {
	for {
		_, err := db.ExecContext(ctx, q)
		var me *mysql.MySQLError
		if err == nil || !errors.As(err, &me) || me.Number != 1047 {
			return err
		}
		select {
		case <-p.done:
			return fmt.Errorf("server exited while starting: %v", p.err)
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// QuietDB returns a pool of one connection for root without a password
// that does not log driver errors: refused connections are expected while
// a server starts.
func QuietDB(network, addr string) *sql.DB {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = network
	cfg.Addr = addr
	cfg.Timeout = 2 * time.Second
	cfg.Logger = &mysql.NopLogger{}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		// NewConnector fails only on an invalid Config, which this is not.
		panic("mysqld: " + err.Error())
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(1)
	return db
}

// logTail returns the last lines the server wrote to its error log after
// offset.
func (s *Server) logTail(offset int64) string {
	f, err := os.Open(s.logFile)
	if err != nil {
		return "(cannot read error log: " + err.Error() + ")"
	}
	defer f.Close()
	const maxTail = 16 << 10
	if fi, err := f.Stat(); err == nil && fi.Size()-offset > maxTail {
		offset = fi.Size() - maxTail
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return "(cannot read error log: " + err.Error() + ")"
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return "(cannot read error log: " + err.Error() + ")"
	}
	if len(b) == 0 {
		return "(error log is empty)"
	}
	return tail(b, tailLines)
}

// pidFile returns the path of the server's pid file.
func (s *Server) pidFile() string {
	return filepath.Join(s.dataDir, "mysqld.pid")
}

// pidFileHolds reports whether the pid file names process pid.
func (s *Server) pidFileHolds(pid int) bool {
	b, err := os.ReadFile(s.pidFile())
	return err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(pid)
}

// runningServer returns the process ID of a server that runs on the data
// directory, according to its pid file and /proc, or 0. Where /proc does not
// exist it returns 0, and a second server fails to start after a while
// instead, when it cannot lock the data files.
func (s *Server) runningServer() int {
	b, err := os.ReadFile(s.pidFile())
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return 0
	}
	// Arguments are separated by NUL bytes.
	for _, arg := range strings.Split(string(cmdline), "\x00") {
		if arg == "--datadir="+s.dataDir {
			return pid
		}
	}
	return 0
}

// removeSocketDir removes the temporary socket directory, if any.
func (s *Server) removeSocketDir() {
	if s.sockDir != "" {
		_ = os.RemoveAll(s.sockDir)
	}
}

// runAsUser returns the --user value: as root, user or else root, since the
// server refuses to run as root unless told to. Other users need no option.
func runAsUser(user string) string {
	if os.Geteuid() != 0 {
		return ""
	}
	if user == "" {
		return "root"
	}
	return user
}

// chownTo gives paths to the system user name, unless name is empty or
// root.
func chownTo(name string, paths ...string) error {
	if name == "" || name == "root" {
		return nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return fmt.Errorf("mysqld: user %s: %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, p := range paths {
		if err := os.Chown(p, uid, gid); err != nil {
			return fmt.Errorf("mysqld: give %s to %s: %w", p, name, err)
		}
	}
	return nil
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("mysqld: pick a port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tmpDir is the server's private directory for temporary files, beside the
// data directory. Servers sharing one tmpdir collide on temporary table names.
func (s *Server) tmpDir() string { return s.dataDir + ".tmp" }
