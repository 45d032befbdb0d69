// Command galerarun runs tests against a 3-node MariaDB Galera cluster on
// loopback (N-6): it starts the cluster with internal/testkit/galera, runs
// go test with ORBIT_TEST_MYSQL_DSN pointing at node 0, so that every test
// writes through one node, and ORBIT_TEST_GALERA listing the DSNs of all
// nodes, then stops the cluster and prints a summary: tests passed, failed
// and skipped, the wall time, and each node's certification failures and
// brute-force aborts.
//
// Usage, from the repository root:
//
//	go run ./internal/testkit/galerarun [-run REGEXP] [-skip REGEXP] [-timeout D] PACKAGE...
//
// make test-galera runs it with the rule tests marked for Galera.
package main

import (
	"bufio"
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/orbitrun/orbit/internal/testkit/galera"
)

// EnvGalera names the variable that lists the DSNs of every node of the
// cluster, node 0 first, separated by commas. Tests that need more than one
// node (TestN7_CertificationConflictRetried) read it and skip without it.
const EnvGalera = "ORBIT_TEST_GALERA"

// counters are the wsrep status counters the summary reports per node.
var counters = []string{"wsrep_local_cert_failures", "wsrep_local_bf_aborts", "wsrep_last_committed"}

// result matches go test -v's result lines of top-level tests.
var result = regexp.MustCompile(`^--- (PASS|FAIL|SKIP): (\S+)`)

func main() {
	run := flag.String("run", "", "go test -run: the tests to run")
	skip := flag.String("skip", "", "go test -skip: the tests not to run")
	timeout := flag.Duration("timeout", 5*time.Minute, "go test -timeout")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "galerarun: name the packages to test")
		os.Exit(2)
	}
	os.Exit(runTests(*run, *skip, *timeout, flag.Args()))
}

func runTests(run, skip string, timeout time.Duration, pkgs []string) int {
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
	// Without -race: make test runs these tests with the race detector;
	// here what is under test is the database, and the race detector
	// would double the time.
	args := []string{"test", "-count=1", "-p", "1", "-v", "-timeout", timeout.String()}
	if run != "" {
		args = append(args, "-run", run)
	}
	if skip != "" {
		args = append(args, "-skip", skip)
	}
	args = append(args, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), "ORBIT_TEST_MYSQL_DSN="+c.DSN(0, ""), EnvGalera+"="+strings.Join(dsns, ","))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "galerarun:", err)
		return 1
	}
	testsBegan := time.Now()
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "galerarun:", err)
		return 1
	}
	counts, failed := scan(out, os.Stdout)
	testErr := cmd.Wait()
	testTime := time.Since(testsBegan)

	fmt.Printf("\n== galera summary\n")
	fmt.Printf("tests: %d passed, %d failed, %d skipped\n", counts["PASS"], counts["FAIL"], counts["SKIP"])
	for _, name := range failed {
		fmt.Printf("  failed: %s\n", name)
	}
	fmt.Printf("time: cluster start %s, tests %s, total %s\n",
		started.Round(time.Second), testTime.Round(time.Second), time.Since(began).Round(time.Second))
	for i := range c.Size() {
		fmt.Printf("node %d: %s\n", i, status(ctx, c.DSN(i, "")))
	}
	if testErr != nil {
		fmt.Printf("go test: %v\n", testErr)
		return 1
	}
	return 0
}

// scan copies go test's output to w and counts the results of top-level
// tests, returning the names of those that failed.
func scan(r io.Reader, w io.Writer) (map[string]int, []string) {
	counts := map[string]int{}
	var failed []string
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
	}
	return counts, failed
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
