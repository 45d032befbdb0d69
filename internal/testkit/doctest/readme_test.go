package doctest

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
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

// guides returns the contents of the README and of the examples' READMEs,
// by path.
func guides(t *testing.T) map[string]string {
	t.Helper()
	root := filepath.Join("..", "..", "..")
	paths, err := filepath.Glob(filepath.Join(root, "examples", "*", "README*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, path := range append(paths, filepath.Join(root, "README.md")) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		out[path] = string(b)
	}
	return out
}

// TestREADMEBootstrapsEachFileOnce holds that a guide followed top to bottom
// in a fresh clone runs: bootstrap refuses to overwrite its --output file, so
// a document must not run it twice for the same file.
func TestREADMEBootstrapsEachFileOnce(t *testing.T) {
	t.Parallel()
	for path, doc := range guides(t) {
		seen := map[string]bool{}
		for _, cmd := range shellCommands(doc) {
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

var timeKey = regexp.MustCompile(`(Idempotency-Key|KEY=).*\$\(date\b`)

// TestREADMEIdempotencyKeysAreNotTimes holds that the guides' commands make
// a key per task: a key made of the current second names every task
// submitted within that second, and the second one conflicts.
func TestREADMEIdempotencyKeysAreNotTimes(t *testing.T) {
	t.Parallel()
	for path, doc := range guides(t) {
		for _, cmd := range shellCommands(doc) {
			if timeKey.MatchString(cmd) {
				t.Errorf("%s makes an idempotency key from the time: %s", path, cmd)
			}
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

var ruleReference = regexp.MustCompile(`\b[A-Z]-[0-9]+\b|§|(?i)\bseeds?\b`)

// TestGuidesSpeakPlainly holds that the files a user reads first (the
// READMEs and orbit.example.yaml) say what they mean instead of citing rule
// ids or sections of the design documents, which users do not have.
func TestGuidesSpeakPlainly(t *testing.T) {
	t.Parallel()
	docs := guides(t)
	example := filepath.Join("..", "..", "..", "orbit.example.yaml")
	b, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	docs[example] = string(b)
	for path, doc := range docs {
		for i, line := range strings.Split(doc, "\n") {
			if m := ruleReference.FindString(line); m != "" {
				t.Errorf("%s:%d cites %q: %s", path, i+1, m, line)
			}
		}
	}
}

// TestResultInboxChineseGuide holds that the Chinese result-inbox guide is
// Markdown whose commands are in sh blocks, cites no manual the repository
// lacks, and counts the platform's tables as its migrations create them.
func TestResultInboxChineseGuide(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..", "..")
	b, err := os.ReadFile(filepath.Join(root, "examples", "result-inbox", "README.zh.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	bootstraps := 0
	for _, cmd := range shellCommands(doc) {
		if bootstrapOutput.MatchString(cmd) {
			bootstraps++
		}
	}
	if bootstraps != 1 {
		t.Errorf("the guide's sh blocks hold %d bootstrap commands, want 1", bootstraps)
	}
	if strings.Contains(doc, "手册") {
		t.Error("the guide cites a manual; the repository has none")
	}

	files, err := filepath.Glob(filepath.Join(root, "modules", "*", "migrations", "*.sql"))
	if err != nil {
		t.Fatal(err)
	}
	platform, err := filepath.Glob(filepath.Join(root, "migrations", "*.sql"))
	if err != nil {
		t.Fatal(err)
	}
	tables := 0
	for _, f := range append(files, platform...) {
		sql, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		tables += len(createTable.FindAll(sql, -1))
	}
	m := tableCount.FindStringSubmatch(doc)
	if m == nil {
		t.Fatal("the guide does not say how many tables the platform has")
	}
	if m[1] != strconv.Itoa(tables) {
		t.Errorf("the guide counts %s platform tables; the migrations create %d", m[1], tables)
	}
}

var (
	createTable = regexp.MustCompile(`(?i)\bCREATE\s+TABLE\b`)
	tableCount  = regexp.MustCompile(`平台本身的(\d+)张表`)
)
