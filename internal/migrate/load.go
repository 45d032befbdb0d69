package migrate

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// fileName is the form of a migration file name: a six-digit version, the
// module that owns the change and what it does.
var fileName = regexp.MustCompile(`^(\d{6})_([a-z][a-z0-9-]*)_([a-z0-9_]+)\.sql$`)

// File is one migration file.
type File struct {
	Version int    // from the name; versions run 1, 2, 3, ... without gaps
	Name    string // the file name, e.g. "000001_admin_identity.sql"
	Module  string // the owning module, e.g. "admin"
	SHA256  string // lowercase hex digest of the file's bytes

	statements []string
}

// Load reads the migration files from the root of fsys, in version order.
// Every file ending in .sql must be named NNNNNN_<module>_<what>.sql, and the
// versions must run from 000001 without gaps or duplicates; otherwise Load
// returns an error, which for the embedded platform files is a programmer
// error. Other files and subdirectories are ignored.
func Load(fsys fs.FS) ([]File, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("migrate: read migrations: %w", err)
	}
	var files []File
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migrate: %s: name must look like 000001_module_what.sql (%s)", e.Name(), fileName)
		}
		version, _ := strconv.Atoi(m[1])
		b, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
		sum := sha256.Sum256(b)
		files = append(files, File{
			Version:    version,
			Name:       e.Name(),
			Module:     m[2],
			SHA256:     hex.EncodeToString(sum[:]),
			statements: splitStatements(string(b)),
		})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Version < files[j].Version })
	for i, f := range files {
		switch {
		case i > 0 && f.Version == files[i-1].Version:
			return nil, fmt.Errorf("migrate: %s and %s have the same version", files[i-1].Name, f.Name)
		case f.Version != i+1:
			return nil, fmt.Errorf("migrate: %s: expected version %06d; versions start at 000001 and have no gaps", f.Name, i+1)
		}
	}
	return files, nil
}

// splitStatements splits a migration file into statements. A statement ends
// at a line whose last non-blank character is ';'. Lines starting with "--"
// are comments and dropped; a ';' inside a line, or at the end of a line
// inside a string, does not end a statement, so migration files keep to one
// statement per ';'-terminated line group. Text after the last ';' counts as
// a final statement.
func splitStatements(text string) []string {
	var stmts []string
	var cur strings.Builder
	flush := func() {
		s := strings.TrimSpace(cur.String())
		s = strings.TrimSpace(strings.TrimSuffix(s, ";"))
		if s != "" {
			stmts = append(stmts, s)
		}
		cur.Reset()
	}
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(strings.TrimRight(line, "\r"))
		cur.WriteByte('\n')
		if strings.HasSuffix(trimmed, ";") {
			flush()
		}
	}
	flush()
	return stmts
}
