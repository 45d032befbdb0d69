package main

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/orbitrun/orbit/cmd/orbit/server"
	"github.com/orbitrun/orbit/config"
	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/migrate"
	"github.com/orbitrun/orbit/internal/mysqld"
	"github.com/orbitrun/orbit/modules"
	"github.com/orbitrun/orbit/modules/admin"
	_ "github.com/orbitrun/orbit/modules/all"
	"github.com/orbitrun/orbit/modules/tasks"
)

// orbitDatabase is the platform database on the throwaway server.
const orbitDatabase = "orbit"

// env is everything the phases share: a private durable database server,
// the Orbit server running in this process, and one credential.
type env struct {
	dir       string
	mysql     *mysqld.Server
	admin     *sql.DB // root on the server, no default database
	pool      *sql.DB // the Orbit server's pool on the orbit database
	cfg       *config.Config
	tasks     *tasks.Module // the server's tasks module, for its wake-ups
	instances modules.Instances
	srv       *server.Server
	url       string
	log       *slog.Logger
	settings  serverSettings
	mysqldPID int
	cred      credential
}

// serverSettings are the facts every run prints.
type serverSettings struct {
	Version             string
	FlushLogAtTrxCommit string
	SyncBinlog          string
	LogBin              string
	Cores               int
	GoVersion           string
	BufferPool          int64 // innodb_buffer_pool_size, bytes
	RedoLog             int64 // innodb_redo_log_capacity (MySQL) or innodb_log_file_size (MariaDB), bytes
	OrbitPoolConns      int
	// GCPercent is the garbage collector's target in effect and its
	// source (server.gc_percent, or GOGC when set).
	GCPercent       int
	GCPercentSource string
}

// credential is the one credential of the run: every permission, a grant
// on every queue the phases use.
type credential struct {
	Token         string
	ID            string
	NamespaceID   string
	ApplicationID string
	Queues        map[string]string // queue name → queue id
}

// databaseSizing sizes the bench's database server as an operator would a
// production one: a buffer pool that holds the run's data and a redo log
// that takes a drain's writes without forcing pages to disk early. The
// test harness's own sizes (128 MiB buffer pool, 48 MiB redo log) are for
// starting many servers at once; a drain of 50,000 events writes about
// 220 MB of redo, so with them the log wrapped several times in each drain
// and InnoDB had to write pages out to reuse it. MySQL sizes its redo log
// by innodb_redo_log_capacity, MariaDB by innodb_log_file_size; each ignores
// the other's (loose).
var databaseSizing = []string{
	"--innodb-buffer-pool-size=1G",
	"--innodb-log-file-size=1G",
	"--loose-innodb-redo-log-capacity=1G",
}

// queueNames lists every queue of the run; the credential is granted all.
func queueNames() []string {
	names := []string{"drain", "nack", "idle"}
	for i := range liveQueues {
		names = append(names, fmt.Sprintf("live-%d", i), fmt.Sprintf("livebatch-%d", i))
	}
	for i := range latencyQueues {
		names = append(names, fmt.Sprintf("lat-%d", i))
	}
	for i := range submitQueues {
		names = append(names, fmt.Sprintf("submit-%d", i))
	}
	return append(names, crossNodeResults, crossNodeTasksA, crossNodeTasksB)
}

// startEnv starts the database server, migrates, starts the Orbit server on
// a loopback port and creates the credential.
func startEnv(ctx context.Context, log *slog.Logger) (_ *env, err error) {
	e := &env{log: log}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.dir, err = os.MkdirTemp("", "orbit-bench-"); err != nil {
		return nil, err
	}
	e.mysql, err = mysqld.Start(ctx, mysqld.Options{
		DataDir: filepath.Join(e.dir, "data"),
		Durable: true,
		LogFile: filepath.Join(e.dir, "mysqld.log"),
		Args:    databaseSizing,
	})
	if err != nil {
		return nil, fmt.Errorf("start database server: %w", err)
	}
	if e.admin, err = db.Open(ctx, e.mysql.DSN("")); err != nil {
		return nil, err
	}
	if _, err := e.admin.ExecContext(ctx, "CREATE DATABASE `"+orbitDatabase+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		return nil, fmt.Errorf("create database: %w", err)
	}
	if err := e.readSettings(ctx); err != nil {
		return nil, err
	}

	e.cfg = config.Default()
	if e.pool, err = db.Open(ctx, e.mysql.DSN(orbitDatabase)); err != nil {
		return nil, err
	}
	e.pool.SetMaxOpenConns(e.cfg.Database.MaxOpenConns)
	e.pool.SetMaxIdleConns(e.cfg.Database.MaxOpenConns)
	e.settings.OrbitPoolConns = e.cfg.Database.MaxOpenConns
	// As `orbit serve` does; the process also holds the SDK clients, so
	// they run with the server's target too.
	e.settings.GCPercent, e.settings.GCPercentSource = server.SetGCPercent(e.cfg.Server.GCPercent)
	if _, err := migrate.Up(ctx, e.pool, modules.Migrations()); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}

	if err := e.startServer(ctx, nil); err != nil {
		return nil, err
	}
	if err := e.createCredential(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// startServer starts an Orbit server with fresh module instances on a new
// loopback port, with tp as its tracer provider (nil: tracing off, the
// default).
func (e *env) startServer(ctx context.Context, tp trace.TracerProvider) error {
	n, err := e.startNode(ctx, e.pool, tp)
	if err != nil {
		return err
	}
	e.instances, e.tasks, e.srv, e.url = n.instances, n.tasks, n.srv, n.url
	return nil
}

// node is one Orbit server: its own module instances, wake-ups and
// listener.
type node struct {
	instances modules.Instances
	tasks     *tasks.Module
	srv       *server.Server
	url       string
}

// startNode starts an Orbit server on pool with fresh module instances on a
// new loopback port, with tp as its tracer provider (nil: tracing off). Two
// nodes in this process share nothing but the database, as two orbit serve
// processes do.
func (e *env) startNode(ctx context.Context, pool *sql.DB, tp trace.TracerProvider) (*node, error) {
	n := &node{instances: modules.NewInstances()}
	if err := n.instances.Validate(); err != nil {
		return nil, fmt.Errorf("module config: %w", err)
	}
	n.tasks = n.instances["tasks"].(*tasks.Module)
	srv, err := server.New(ctx, server.Params{Config: e.cfg, DB: pool, Logger: e.log, Instances: n.instances, Tracing: tp})
	if err != nil {
		return nil, fmt.Errorf("orbit server: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	// The modules' background loops live until Stop, not until ctx ends.
	if err := srv.Start(context.WithoutCancel(ctx), ln); err != nil {
		ln.Close()
		return nil, fmt.Errorf("orbit server: start: %w", err)
	}
	n.srv, n.url = srv, "http://"+ln.Addr().String()
	return n, nil
}

// stop stops the node's server.
func (n *node) stop(log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := n.srv.Stop(ctx); err != nil {
		log.Warn("stop orbit server", "err", err)
	}
}

// restartServer stops the Orbit server and starts another on the same
// database with tp as its tracer provider.
func (e *env) restartServer(ctx context.Context, tp trace.TracerProvider) error {
	e.stopServer()
	return e.startServer(ctx, tp)
}

// stopServer stops the Orbit server, if one runs.
func (e *env) stopServer() {
	if e.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := e.srv.Stop(ctx); err != nil {
		e.log.Warn("stop orbit server", "err", err)
	}
	e.srv = nil
}

// readSettings reads the server facts that decide what a commit costs.
func (e *env) readSettings(ctx context.Context) error {
	var pidFile string
	var flush, syncBinlog, logBin sql.NullString
	err := e.admin.QueryRowContext(ctx, `SELECT @@version, @@innodb_flush_log_at_trx_commit, @@sync_binlog, @@log_bin, @@pid_file`).
		Scan(&e.settings.Version, &flush, &syncBinlog, &logBin, &pidFile)
	if err != nil {
		return fmt.Errorf("read server settings: %w", err)
	}
	if err := e.readSizing(ctx); err != nil {
		return err
	}
	e.settings.FlushLogAtTrxCommit = flush.String
	e.settings.SyncBinlog = syncBinlog.String
	e.settings.LogBin = onOff(logBin.String)
	e.settings.Cores = runtime.NumCPU()
	e.settings.GoVersion = runtime.Version()
	if b, err := os.ReadFile(pidFile); err == nil {
		e.mysqldPID, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	return nil
}

// readSizing reads the buffer pool's and the redo log's sizes.
func (e *env) readSizing(ctx context.Context) error {
	rows, err := e.admin.QueryContext(ctx, `SHOW GLOBAL VARIABLES WHERE Variable_name IN
		('innodb_buffer_pool_size', 'innodb_log_file_size', 'innodb_redo_log_capacity')`)
	if err != nil {
		return fmt.Errorf("read server sizing: %w", err)
	}
	defer rows.Close()
	var logFile, capacity int64
	for rows.Next() {
		var name string
		var value int64
		if err := rows.Scan(&name, &value); err != nil {
			return fmt.Errorf("read server sizing: %w", err)
		}
		switch strings.ToLower(name) {
		case "innodb_buffer_pool_size":
			e.settings.BufferPool = value
		case "innodb_log_file_size":
			logFile = value
		case "innodb_redo_log_capacity":
			capacity = value
		}
	}
	e.settings.RedoLog = cmp.Or(capacity, logFile)
	return rows.Err()
}

func onOff(v string) string {
	switch v {
	case "0":
		return "OFF"
	case "1":
		return "ON"
	}
	return v
}

func (e *env) createCredential(ctx context.Context) error {
	store := admin.NewStore(e.pool)
	e.cred.Queues = map[string]string{}
	var ids []string
	var sc admin.Scope
	for _, q := range queueNames() {
		var err error
		sc, err = store.ScopeEnsure(ctx, &admin.ScopeEnsureParams{
			Namespace: "bench", Application: "bench", Environment: "bench", Queue: q,
		})
		if err != nil {
			return fmt.Errorf("scope: %w", err)
		}
		e.cred.Queues[q] = sc.QueueID
		ids = append(ids, sc.QueueID)
	}
	cred, token, err := store.CredentialCreate(ctx, &admin.CredentialCreateParams{
		NamespaceID: sc.NamespaceID, ApplicationID: sc.ApplicationID, EnvironmentID: sc.EnvironmentID,
		Label: "bench", Permissions: auth.AllPermissions, Queues: ids,
	})
	if err != nil {
		return fmt.Errorf("credential: %w", err)
	}
	e.cred.Token, e.cred.ID = token, cred.ID
	e.cred.NamespaceID, e.cred.ApplicationID = sc.NamespaceID, sc.ApplicationID
	return nil
}

// close stops the Orbit server and the database server and removes the
// temporary directory. It is safe on a partly started env.
func (e *env) close() {
	e.stopServer()
	if e.pool != nil {
		e.pool.Close()
	}
	if e.admin != nil {
		e.admin.Close()
	}
	if e.mysql != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := e.mysql.Stop(ctx); err != nil {
			e.log.Warn("stop database server", "err", err)
		}
		cancel()
	}
	if e.dir != "" {
		os.RemoveAll(e.dir)
	}
}

// counters is a snapshot of what a phase costs: database commits and redo
// log fsyncs, and CPU time of this process and of the database server.
type counters struct {
	at            time.Time
	comCommit     int64 // explicit COMMIT statements
	handlerCommit int64 // storage-engine commits, autocommit statements included
	logFsyncs     int64 // InnoDB fsyncs, see fsyncSource
	lockWaits     int64 // row lock waits
	questions     int64 // statements clients sent
	lockTime      time.Duration
	poolWaits     int64 // waits of the Orbit pool for a free connection
	poolWaitTime  time.Duration
	selfCPU       time.Duration
	mysqldCPU     time.Duration
	machineCPU    time.Duration // busy time of every core, every process
	// rowWork holds the status counters of rowWorkVars: row and index
	// work that does not depend on the machine's speed.
	rowWork map[string]int64
}

// rowWorkVars are the global status counters a snapshot keeps in
// counters.rowWork: statements by kind, handler calls (each index lookup,
// row read, row written), InnoDB rows and the redo log's bytes. They count
// work, not time, so they compare runs on a busy machine.
var rowWorkVars = []string{
	"Com_select", "Com_insert", "Com_update", "Com_delete",
	"Handler_write", "Handler_update", "Handler_delete",
	"Handler_read_key", "Handler_read_next", "Handler_read_rnd_next",
	"Innodb_rows_inserted", "Innodb_rows_updated", "Innodb_rows_deleted", "Innodb_rows_read",
	"Innodb_os_log_written", "Innodb_buffer_pool_write_requests",
}

func (e *env) snapshot(ctx context.Context) (counters, error) {
	c := counters{at: time.Now(), rowWork: map[string]int64{}}
	rows, err := e.admin.QueryContext(ctx, `SHOW GLOBAL STATUS WHERE Variable_name IN
		('Com_commit', 'Handler_commit', 'Innodb_os_log_fsyncs', 'Innodb_data_fsyncs', 'Innodb_row_lock_waits', 'Innodb_row_lock_time', 'Questions',
		'`+strings.Join(rowWorkVars, "', '")+`')`)
	if err != nil {
		return c, fmt.Errorf("global status: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return c, err
		}
		n, _ := strconv.ParseInt(value, 10, 64)
		for _, v := range rowWorkVars {
			if strings.EqualFold(v, name) {
				c.rowWork[v] = n
			}
		}
		switch strings.ToLower(name) {
		case "com_commit":
			c.comCommit = n
		case "handler_commit":
			c.handlerCommit = n
		case "innodb_os_log_fsyncs":
			// MySQL counts the redo log's fsyncs apart.
			c.logFsyncs, fsyncSource = n, "Innodb_os_log_fsyncs"
		case "innodb_data_fsyncs":
			// MariaDB 10.8+ counts every InnoDB fsync, redo log included,
			// here only.
			if fsyncSource != "Innodb_os_log_fsyncs" {
				c.logFsyncs, fsyncSource = n, "Innodb_data_fsyncs"
			}
		case "questions":
			c.questions = n
		case "innodb_row_lock_waits":
			c.lockWaits = n
		case "innodb_row_lock_time":
			c.lockTime = time.Duration(n) * time.Millisecond
		}
	}
	if err := rows.Err(); err != nil {
		return c, err
	}
	st := e.pool.Stats()
	c.poolWaits, c.poolWaitTime = st.WaitCount, st.WaitDuration
	c.selfCPU = procCPU("self")
	c.machineCPU = machineCPU()
	if e.mysqldPID > 0 {
		c.mysqldCPU = procCPU(strconv.Itoa(e.mysqldPID))
	}
	return c, nil
}

// fsyncSource names the status variable counters.logFsyncs comes from.
var fsyncSource = "Innodb_data_fsyncs"

// cost is the difference of two snapshots.
type cost struct {
	Elapsed       time.Duration
	ComCommit     int64
	HandlerCommit int64
	LogFsyncs     int64
	LockWaits     int64
	LockTime      time.Duration
	Questions     int64
	PoolWaits     int64
	PoolWaitTime  time.Duration
	SelfCPU       time.Duration
	MysqldCPU     time.Duration
	MachineCPU    time.Duration
	RowWork       map[string]int64 // deltas of rowWorkVars
}

func (a counters) to(b counters) cost {
	return cost{
		Elapsed: b.at.Sub(a.at), ComCommit: b.comCommit - a.comCommit, HandlerCommit: b.handlerCommit - a.handlerCommit,
		LogFsyncs: b.logFsyncs - a.logFsyncs, LockWaits: b.lockWaits - a.lockWaits, Questions: b.questions - a.questions, LockTime: b.lockTime - a.lockTime,
		PoolWaits: b.poolWaits - a.poolWaits, PoolWaitTime: b.poolWaitTime - a.poolWaitTime, SelfCPU: b.selfCPU - a.selfCPU, MysqldCPU: b.mysqldCPU - a.mysqldCPU,
		MachineCPU: b.machineCPU - a.machineCPU, RowWork: rowWorkDelta(a.rowWork, b.rowWork),
	}
}

func rowWorkDelta(a, b map[string]int64) map[string]int64 {
	d := make(map[string]int64, len(b))
	for k, v := range b {
		d[k] = v - a[k]
	}
	return d
}

// cpuShare returns CPU time as a share of one core over the elapsed time,
// in percent (200 % is both cores of a 2-core machine).
func cpuShare(d, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return 100 * d.Seconds() / elapsed.Seconds()
}

// procCPU returns user+system CPU time of /proc/<pid>, or 0 when unknown.
func procCPU(pid string) time.Duration {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	// Fields after the command: state is field 3; utime and stime are
	// fields 14 and 15, counted in clock ticks (100 per second on Linux).
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// machineCPU returns the busy time (all but idle and iowait) of every core
// since boot, from /proc/stat, or 0 when unknown.
func machineCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest time is already in user
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		busy += n
	}
	return time.Duration(busy) * 10 * time.Millisecond
}

// loadAverage returns the 1-minute load average as /proc/loadavg shows it.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// rss returns VmRSS and VmHWM (peak) of this process in bytes.
func rss() (cur, peak int64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			cur = kb * 1024
		case "VmHWM:":
			peak = kb * 1024
		}
	}
	return cur, peak
}

// waitFor polls cond every interval until it returns true, an error, or
// the timeout passes.
func waitFor(ctx context.Context, timeout, interval time.Duration, what string, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
}
