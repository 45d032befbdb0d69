package doctest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// shellCommands returns the commands of the sh blocks of a Markdown
// document, in order, with backslash continuations joined.
func shellCommands(doc string) []string {
	var cmds []string
	in := false
	cmd := ""
	for line := range strings.Lines(doc) {
		trimmed := strings.TrimSpace(line)
		switch {
		case !in && (trimmed == "```sh" || trimmed == "```bash"):
			in = true
			continue
		case in && trimmed == "```":
			in = false
			continue
		case !in:
			continue
		}
		if strings.HasSuffix(trimmed, `\`) {
			cmd += strings.TrimSpace(strings.TrimSuffix(trimmed, `\`)) + " "
			continue
		}
		cmd += trimmed
		if cmd != "" {
			cmds = append(cmds, cmd)
		}
		cmd = ""
	}
	return cmds
}

var bootstrapOutput = regexp.MustCompile(`\bbootstrap\b.*--output[ =](\S+)`)

// TestREADMEBootstrapsEachFileOnce holds that a guide followed top to bottom
// in a fresh clone runs: bootstrap refuses to overwrite its --output file, so
// a document must not run it twice for the same file.
func TestREADMEBootstrapsEachFileOnce(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..", "..")
	docs, err := filepath.Glob(filepath.Join(root, "examples", "*", "README*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append([]string{filepath.Join(root, "README.md")}, docs...)
	for _, path := range docs {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, cmd := range shellCommands(string(b)) {
			m := bootstrapOutput.FindStringSubmatch(cmd)
			if m == nil {
				continue
			}
			if seen[m[1]] {
				t.Errorf("%s runs bootstrap --output %s twice; the second refuses to overwrite the file", path, m[1])
			}
			seen[m[1]] = true
		}
	}
}

func TestShellCommandsJoinsContinuations(t *testing.T) {
	t.Parallel()
	doc := "text\n```sh\na \\\n  b\nc\n```\n```json\n{}\n```\n"
	got := strings.Join(shellCommands(doc), "|")
	if want := "a b|c"; got != want {
		t.Fatalf("commands %q, want %q", got, want)
	}
}
