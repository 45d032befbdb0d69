// Command fuzzrun runs every fuzz target of the project (F-3) for a fixed
// time each and prints a Markdown table of executions, new corpus entries
// and crashers, for docs/reliability.md. A crasher is written by go test into
// the package's testdata/fuzz/<target>/, where it stays as a regression seed
// that every later `go test` runs; fuzzrun then exits 1.
//
// Usage, from the repository root: go run ./internal/testkit/fuzzrun [-fuzztime 60s] [-run REGEXP]
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"regexp"
	"strings"
	"time"
)

// target is one fuzz function: the Go module it lives in (a directory of
// the repository) and its package within that module.
type target struct {
	module, pkg, name string
}

// targets are every fuzz function of the project. A new Fuzz function must
// be added here; TestF3_MakeFuzzRunsEveryFuzzFunction checks it.
var targets = []target{
	{".", "./internal/httpx", "FuzzDecodeJSONBytes"},
	{".", "./internal/httpx", "FuzzCanonicalJSON"},
	{".", "./internal/httpx", "FuzzParseUint64"},
	{".", "./internal/httpx", "FuzzDecodeCursor"},
	{".", "./internal/wsx", "FuzzDecodeFrame"},
	{".", "./internal/wsx", "FuzzParseSecret"},
	{".", "./modules/events", "FuzzEventsFrame"},
	{".", "./modules/workers", "FuzzWorkersFrame"},
	{".", "./config", "FuzzLoad"},
	{"examples/result-inbox", "./inbox", "FuzzCanonicalize"},
	{"sdk/go", ".", "FuzzDecodeOnceMatchesGeneralPath"},
}

// progress matches go test's fuzzing progress lines, e.g.
// "fuzz: elapsed: 3s, execs: 850 (280/sec), new interesting: 2 (total: 11)".
var progress = regexp.MustCompile(`execs: (\d+) .*new interesting: (\d+)`)

func main() {
	fuzztime := flag.Duration("fuzztime", 60*time.Second, "how long to fuzz each target")
	run := flag.String("run", "", "fuzz only the targets whose name matches this regular expression")
	flag.Parse()
	only, err := regexp.Compile(*run)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fuzzrun: -run: %v\n", err)
		os.Exit(2)
	}

	failed := false
	var table strings.Builder
	fmt.Fprintf(&table, "| target | package | time | executions | new corpus entries | result |\n|---|---|---|---|---|---|\n")
	for _, t := range targets {
		if !only.MatchString(t.name) {
			continue
		}
		fmt.Fprintf(os.Stderr, "fuzzrun: %s (%s) for %s\n", t.name, t.pkg, *fuzztime)
		execs, interesting, out, err := fuzz(t, *fuzztime)
		result := "no crasher"
		if err != nil {
			failed = true
			result = "FAILED: " + firstFailure(out)
			os.Stderr.Write(out)
		}
		fmt.Fprintf(&table, "| %s | %s | %s | %s | %s | %s |\n", t.name, path.Join(t.module, t.pkg), *fuzztime, execs, interesting, result)
	}
	fmt.Print(table.String())
	if failed {
		os.Exit(1)
	}
}

// fuzz runs one target and returns the executions and new corpus entries
// of its last progress line, and go test's output.
func fuzz(t target, d time.Duration) (execs, interesting string, out []byte, err error) {
	cmd := exec.Command("go", "test", "-run=^$", "-fuzz=^"+t.name+"$", "-fuzztime="+d.String(), t.pkg)
	cmd.Dir = t.module
	cmd.Env = append(os.Environ(), "GOWORK=off") // each module on its own, as make test runs it
	out, err = cmd.CombinedOutput()
	execs, interesting = "?", "?"
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := progress.FindStringSubmatch(sc.Text()); m != nil {
			execs, interesting = m[1], m[2]
		}
	}
	return execs, interesting, out, err
}

// firstFailure returns the first line of out that says what failed.
func firstFailure(out []byte) string {
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "Error") || strings.Contains(line, "panic:") || strings.Contains(line, "_test.go:") {
			return strings.TrimSpace(strings.ReplaceAll(line, "|", "/"))
		}
	}
	return "see the output above"
}
