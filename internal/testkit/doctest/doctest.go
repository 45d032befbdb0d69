// Package doctest keeps the JSON examples in docs/api/*.md true.
//
// An example in a document is a fenced json block preceded by a marker line:
//
//	<!-- example: tasks-submit-response -->
//	```json
//	{ … }
//	```
//
// A test performs the real request against a real server and passes what it
// sent or received to Check, which normalises it (ids, times and lease
// secrets become fixed placeholders, in order of appearance) and compares it
// with the block. Run the tests with ORBIT_UPDATE_DOCS=1 to rewrite the
// blocks from what the server actually produced.
package doctest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// UpdateEnv names the environment variable that makes Check rewrite blocks.
const UpdateEnv = "ORBIT_UPDATE_DOCS"

var (
	idPattern     = regexp.MustCompile(`"[0-9a-f]{32}"`)
	timePattern   = regexp.MustCompile(`"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z"`)
	secretPattern = regexp.MustCompile(`"[A-Za-z0-9_-]{43}"`)
	// agePattern matches ages measured when a response is made, which
	// differ from run to run unless they are 0.
	agePattern = regexp.MustCompile(`("[a-z_]*age_ms": )[1-9][0-9]*`)
	fileLocks  sync.Map // path -> *sync.Mutex
)

// placeholders are the ids substituted in order of first appearance, in the
// style of the seed documents.
var placeholders = []string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "a", "b", "c", "d", "e", "f"}

// Normalize pretty-prints raw JSON with two-space indentation and replaces
// ids, times, 32-byte secrets and non-zero ages (members ending in
// age_ms) with stable placeholders.
func Normalize(raw []byte) (string, error) {
	var out bytes.Buffer
	if err := json.Indent(&out, bytes.TrimSpace(raw), "", "  "); err != nil {
		return "", fmt.Errorf("doctest: not JSON: %w", err)
	}
	s := out.String()
	ids := map[string]string{}
	s = idPattern.ReplaceAllStringFunc(s, func(id string) string {
		if p, ok := ids[id]; ok {
			return p
		}
		n := len(ids)
		var p string
		if n < len(placeholders) {
			p = `"` + strings.Repeat(placeholders[n], 32) + `"`
		} else {
			p = fmt.Sprintf(`"%032x"`, n+1)
		}
		ids[id] = p
		return p
	})
	s = timePattern.ReplaceAllString(s, `"2026-09-17T10:00:00Z"`)
	s = secretPattern.ReplaceAllString(s, `"`+strings.Repeat("A", 43)+`"`)
	s = agePattern.ReplaceAllString(s, "${1}1500")
	return s, nil
}

// Check compares raw, normalised, with the example named name in the
// Markdown file at path, or rewrites the example when ORBIT_UPDATE_DOCS=1.
func Check(t testing.TB, path, name string, raw []byte) {
	t.Helper()
	want, err := Normalize(raw)
	if err != nil {
		t.Fatalf("doctest %s: %v", name, err)
	}
	mu, _ := fileLocks.LoadOrStore(path, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("doctest: %v", err)
	}
	start, end, ok := findBlock(string(doc), name)
	if !ok {
		t.Fatalf("doctest: %s has no example %q: add the line <!-- example: %s --> followed by a ```json block", path, name, name)
	}
	got := strings.TrimSpace(string(doc)[start:end])
	if got == want {
		return
	}
	if os.Getenv(UpdateEnv) == "1" {
		updated := string(doc)[:start] + want + "\n" + string(doc)[end:]
		if err := os.WriteFile(path, []byte(updated), 0o644); err != nil {
			t.Fatalf("doctest: %v", err)
		}
		return
	}
	t.Errorf("doctest: example %q in %s differs from what the server produced (run with %s=1 to update).\n--- document ---\n%s\n--- server ---\n%s", name, path, UpdateEnv, got, want)
}

// findBlock returns the byte range of the body of the json block that
// follows the marker of name.
func findBlock(doc, name string) (int, int, bool) {
	marker := "<!-- example: " + name + " -->"
	i := strings.Index(doc, marker)
	if i < 0 {
		return 0, 0, false
	}
	rest := doc[i+len(marker):]
	open := strings.Index(rest, "```json\n")
	if open < 0 || strings.TrimSpace(rest[:open]) != "" {
		return 0, 0, false
	}
	bodyStart := i + len(marker) + open + len("```json\n")
	close := strings.Index(doc[bodyStart:], "```")
	if close < 0 {
		return 0, 0, false
	}
	return bodyStart, bodyStart + close, true
}
