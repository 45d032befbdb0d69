package doctest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNormalizeReplacesIdsTimesAndSecrets(t *testing.T) {
	t.Parallel()
	got, err := Normalize([]byte(`{"a":"0123456789abcdef0123456789abcdef","b":"0123456789abcdef0123456789abcdef","c":"fedcba9876543210fedcba9876543210","t":"2025-01-02T03:04:05.123Z","s":"` + strings.Repeat("x", 43) + `","n":12}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "a": "11111111111111111111111111111111",
  "b": "11111111111111111111111111111111",
  "c": "22222222222222222222222222222222",
  "t": "2026-09-17T10:00:00Z",
  "s": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
  "n": 12
}`
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

func TestCheckFindsTheMarkedBlock(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "doc.md")
	doc := "# Doc\n\n<!-- example: one -->\n```json\n{\n  \"x\": 1\n}\n```\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	Check(t, path, "one", []byte(`{"x":1}`))
	fake := &recorder{TB: t}
	Check(fake, path, "one", []byte(`{"x":2}`))
	if !fake.failed {
		t.Fatal("a differing example must fail the test")
	}
}

type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) Helper()               {}
