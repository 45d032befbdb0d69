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

// fileName is the form of a migration file name in its folder: a six-digit
// version and what the file does.
var fileName = regexp.MustCompile(`^(\d{6})_([a-z0-9_]+)\.sql$`)

// moduleID is the form of a module ID, as package modules allows it.
var moduleID = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)

// Source is one folder of migration files and the module that owns them.
type Source struct {
	// Module is the ID of the owning module, or empty for the platform-wide
	// files that belong to no module (the top-level migrations folder).
	Module string
	// FS holds the files, named NNNNNN_<what>.sql, at its root. Other files
	// and subdirectories are ignored.
	FS fs.FS
}

// Set is every migration a binary knows: the folders the files come from and
// the names under which an earlier orbit recorded files that have moved since.
type Set struct {
	Sources []Source
	// Renamed maps a name recorded in schema_migrations by an earlier orbit
	// to the name of the same file now (same version, same bytes). A database
	// that holds the old name is up to date with the file; its row is left as
	// it is, so that an older orbit still accepts the database.
	Renamed map[string]string
}

// File is one migration file.
type File struct {
	Version int    // from the name; versions run 1, 2, 3, ... without gaps, across every source
	Name    string // the name recorded in schema_migrations, e.g. "000001_admin_identity.sql"
	Module  string // the owning module, e.g. "admin"; empty for a platform-wide file
	SHA256  string // lowercase hex digest of the file's bytes

	statements []string
}

// recordedName returns the name a file is recorded under in
// schema_migrations: NNNNNN_<module>_<what>.sql for a module's file
// NNNNNN_<what>.sql, the same form every file had while all of them lived in
// one folder; a platform-wide file keeps its own name.
func recordedName(module, version, what string) string {
	if module == "" {
		return version + "_" + what + ".sql"
	}
	return version + "_" + module + "_" + what + ".sql"
}

// Load reads the migration files of every source of set into one global
// version order. Every file ending in .sql must be named NNNNNN_<what>.sql,
// and the versions of all sources together must run from 000001 without gaps
// or duplicates; every entry of set.Renamed must name a file of the same
// version. Otherwise Load returns an error, which for the embedded platform
// files is a programmer error.
func Load(set Set) ([]File, error) {
	var files []File
	where := map[string]string{} // recorded name -> module/file, for messages
	for _, src := range set.Sources {
		if src.Module != "" && !moduleID.MatchString(src.Module) {
			return nil, fmt.Errorf("migrate: invalid module id %q", src.Module)
		}
		entries, err := fs.ReadDir(src.FS, ".")
		if err != nil {
			return nil, fmt.Errorf("migrate: read migrations of %s: %w", owner(src.Module), err)
		}
		for _, e := range entries {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
				continue
			}
			path := owner(src.Module) + "/" + e.Name()
			m := fileName.FindStringSubmatch(e.Name())
			if m == nil {
				return nil, fmt.Errorf("migrate: %s: name must look like 000001_what.sql (%s)", path, fileName)
			}
			version, _ := strconv.Atoi(m[1])
			b, err := fs.ReadFile(src.FS, e.Name())
			if err != nil {
				return nil, fmt.Errorf("migrate: %s: %w", path, err)
			}
			sum := sha256.Sum256(b)
			f := File{
				Version:    version,
				Name:       recordedName(src.Module, m[1], m[2]),
				Module:     src.Module,
				SHA256:     hex.EncodeToString(sum[:]),
				statements: splitStatements(string(b)),
			}
			where[f.Name] = path
			files = append(files, f)
		}
	}
	sort.SliceStable(files, func(i, j int) bool { return files[i].Version < files[j].Version })
	for i, f := range files {
		switch {
		case i > 0 && f.Version == files[i-1].Version:
			return nil, fmt.Errorf("migrate: %s and %s have the same version; numbers are global across modules, take the next free one",
				where[files[i-1].Name], where[f.Name])
		case f.Version != i+1:
			return nil, fmt.Errorf("migrate: %s: expected version %06d; versions start at 000001 and have no gaps across modules",
				where[f.Name], i+1)
		}
	}
	for old, now := range set.Renamed {
		f, ok := byName(files, now)
		if !ok {
			return nil, fmt.Errorf("migrate: renamed %s: no file is named %s", old, now)
		}
		if !strings.HasPrefix(old, fmt.Sprintf("%06d_", f.Version)) {
			return nil, fmt.Errorf("migrate: renamed %s: not the version of %s", old, now)
		}
	}
	return files, nil
}

// owner names the folder of a source's files in messages.
func owner(module string) string {
	if module == "" {
		return "migrations"
	}
	return "modules/" + module + "/migrations"
}

// byName returns the file recorded under name.
func byName(files []File, name string) (File, bool) {
	for _, f := range files {
		if f.Name == name {
			return f, true
		}
	}
	return File{}, false
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
