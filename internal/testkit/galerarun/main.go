// Command galerarun runs tests against a 3-node MariaDB Galera cluster on
// loopback (N-6): it starts the cluster with internal/testkit/galera, runs
// go test with ORBIT_TEST_MYSQL_DSN pointing at node 0, so that every test
// writes through one node, and ORBIT_TEST_GALERA listing the DSNs of all
// nodes, then stops the cluster and prints a summary: tests passed, failed
// and skipped, the wall time, the figures tests report for it, and each
// node's certification failures and brute-force aborts.
//
// Tests that kill node 0 (N-8) would break every other test on the cluster:
// -kill-run and -kill-pkgs name them, and they run last, alone, on the same
// cluster, with ORBIT_TEST_MYSQL_DSN on node 1 (their own databases survive
// node 0) and ORBIT_TEST_GALERA_CONTROL, the URL of a small HTTP server
// through which they kill a node: POST {URL}/kill?node=N answers 204 once
// node N's process has exited. Running them on the cluster already started
// spares a second cluster start, 20 seconds to a minute on 2 cores.
//
// A test line (t.Log) holding "galera-summary: " is repeated in the summary.
//
// Usage, from the repository root:
//
//	go run ./internal/testkit/galerarun [-run REGEXP] [-skip REGEXP] [-timeout D] [-kill-run REGEXP -kill-pkgs PKG,...] PACKAGE...
//
// make test-galera runs it with the rule tests marked for Galera and the
// failover test.
package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/orbitrun/orbit/internal/testkit/galera"
)

const (
	// EnvControl names the variable with the URL of the control server,
	// set only for the tests of -kill-run.
	EnvControl = "ORBIT_TEST_GALERA_CONTROL"

	// summaryMarker marks a test's log line that the summary repeats.
	summaryMarker = "galera-summary: "
)

// counters are the wsrep status counters the summary reports per node.
var counters = []string{"wsrep_local_cert_failures", "wsrep_local_bf_aborts", "wsrep_last_committed"}

// result matches go test -v's result lines of top-level tests.
var result = regexp.MustCompile(`^--- (PASS|FAIL|SKIP): (\S+)`)

func main() {
	run := flag.String("run", "", "go test -run: the tests to run")
	skip := flag.String("skip", "", "go test -skip: the tests not to run")
	timeout := flag.Duration("timeout", 5*time.Minute, "go test -timeout")
	killRun := flag.String("kill-run", "", "go test -run of the tests that kill node 0, run last and alone")
	killPkgs := flag.String("kill-pkgs", "", "comma-separated packages of the -kill-run tests")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "galerarun: name the packages to test")
		os.Exit(2)
	}
	if (*killRun == "") != (*killPkgs == "") {
		fmt.Fprintln(os.Stderr, "galerarun: -kill-run and -kill-pkgs go together")
		os.Exit(2)
	}
	var kill *phase
	if *killRun != "" {
		kill = &phase{name: "kill phase", run: *killRun, pkgs: strings.Split(*killPkgs, ",")}
	}
	os.Exit(runTests(phase{name: "tests", run: *run, skip: *skip, pkgs: flag.Args()}, kill, *timeout))
}

// phase is one go test run.
type phase struct {
	name      string
	run, skip string
	pkgs      []string

	// Set by test.
	counts   map[string]int
	failed   []string
	measured []string // the summary lines the tests logged
	took     time.Duration
	err      error
}

func runTests(tests phase, kill *phase, timeout time.Duration) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	began := time.Now()
	c, err := galera.Start(ctx, galera.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "galerarun:", err)
		return 1
	}
	started := time.Since(began)
	fmt.Printf("galera: 3 nodes synced in %s; writing through node 0 (%s)\n", started.Round(time.Second), c.Addr(0))
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "galerarun:", err)
		}
	}()

	var dsns []string
	for i := range c.Size() {
		dsns = append(dsns, c.DSN(i, ""))
	}
	galeraEnv := galera.EnvNodes + "=" + strings.Join(dsns, ",")
	tests.test(ctx, timeout, "ORBIT_TEST_MYSQL_DSN="+c.DSN(0, ""), galeraEnv)
	phases := []*phase{&tests}
	if kill != nil {
		url, stopControl, err := serveControl(c)
		if err != nil {
			fmt.Fprintln(os.Stderr, "galerarun:", err)
			return 1
		}
		fmt.Printf("\n== %s: %s, node 0 may be killed\n", kill.name, kill.run)
		kill.test(ctx, timeout, "ORBIT_TEST_MYSQL_DSN="+c.DSN(1, ""), galeraEnv, EnvControl+"="+url)
		stopControl()
		phases = append(phases, kill)
	}

	fmt.Printf("\n== galera summary\n")
	code := 0
	times := []string{"cluster start " + started.Round(time.Second).String()}
	for _, p := range phases {
		fmt.Printf("%s: %d passed, %d failed, %d skipped\n", p.name, p.counts["PASS"], p.counts["FAIL"], p.counts["SKIP"])
		for _, name := range p.failed {
			fmt.Printf("  failed: %s\n", name)
		}
		times = append(times, p.name+" "+p.took.Round(time.Second).String())
	}
	fmt.Printf("time: %s, total %s\n", strings.Join(times, ", "), time.Since(began).Round(time.Second))
	for _, p := range phases {
		for _, m := range p.measured {
			fmt.Printf("measured: %s\n", m)
		}
	}
	for i := range c.Size() {
		if !c.Running(i) {
			fmt.Printf("node %d: killed by a test\n", i)
			continue
		}
		fmt.Printf("node %d: %s\n", i, status(ctx, c.DSN(i, "")))
	}
	for _, p := range phases {
		if p.err != nil {
			fmt.Printf("go test (%s): %v\n", p.name, p.err)
			code = 1
		}
	}
	return code
}

// test runs go test -v on p's packages with env added to the environment,
// copying its output to standard output, and records the results in p.
func (p *phase) test(ctx context.Context, timeout time.Duration, env ...string) {
	// Without -race: make test runs these tests with the race detector;
	// here what is under test is the database, and the race detector
	// would double the time.
	args := []string{"test", "-count=1", "-p", "1", "-v", "-timeout", timeout.String()}
	if p.run != "" {
		args = append(args, "-run", p.run)
	}
	if p.skip != "" {
		args = append(args, "-skip", p.skip)
	}
	args = append(args, p.pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	began := time.Now()
	defer func() { p.took = time.Since(began) }()
	out, err := cmd.StdoutPipe()
	if err != nil {
		p.err = err
		return
	}
	if err := cmd.Start(); err != nil {
		p.err = err
		return
	}
	p.counts, p.failed, p.measured = scan(out, os.Stdout)
	p.err = cmd.Wait()
}

// scan copies go test's output to w and counts the results of top-level
// tests, returning the names of those that failed and the summary lines
// the tests logged.
func scan(r io.Reader, w io.Writer) (map[string]int, []string, []string) {
	counts := map[string]int{}
	var failed, measured []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(w, line)
		if m := result.FindStringSubmatch(line); m != nil {
			counts[m[1]]++
			if m[1] == "FAIL" {
				failed = append(failed, m[2])
			}
		}
		if _, m, ok := strings.Cut(line, summaryMarker); ok {
			measured = append(measured, m)
		}
	}
	return counts, failed, measured
}

// serveControl starts the control server of the kill phase on loopback and
// returns its URL and a function that stops it.
func serveControl(c *galera.Cluster) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("control server: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /kill", func(w http.ResponseWriter, r *http.Request) {
		i, err := strconv.Atoi(r.URL.Query().Get("node"))
		if err != nil || i < 0 || i >= c.Size() {
			http.Error(w, fmt.Sprintf("node: want 0 to %d", c.Size()-1), http.StatusBadRequest)
			return
		}
		c.Kill(i)
		fmt.Printf("galerarun: node %d killed (SIGKILL) at the request of a test\n", i)
		w.WriteHeader(http.StatusNoContent)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "galerarun: control server:", err)
		}
	}()
	return "http://" + ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}

// status returns a node's wsrep counters as "name=value ...".
func status(ctx context.Context, dsn string) string {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return err.Error()
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return err.Error()
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	var parts []string
	for _, name := range counters {
		var n, v string
		err := db.QueryRowContext(ctx, `SELECT VARIABLE_NAME, VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS
			WHERE VARIABLE_NAME = ?`, name).Scan(&n, &v)
		if err != nil {
			return err.Error()
		}
		parts = append(parts, strings.TrimPrefix(strings.ToLower(n), "wsrep_")+"="+v)
	}
	return strings.Join(parts, " ")
}
