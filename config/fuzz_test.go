package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoad (F-3): any orbit.yaml, however broken, loads and validates or is
// refused with an error whose problems are lines of text; it never panics.
func FuzzLoad(f *testing.F) {
	for _, s := range []string{
		"server:\n  listen: 127.0.0.1:8080\n  modules: [admin, tasks]\ntasks:\n  lease_duration: 30s\n  nested:\n    name: x\n",
		"server:\n  listen: [1, 2]\n", "tasks:\n  lease_duration: eight\n", "log:\n  format: xml\n  level: loud\n",
		"server: &a\n  x: *a\n", "server:\n  modules: {admin: 1}\n", "\t- :", "database:\n  dsn: \"root:pw@tcp(127.0.0.1:1)/\"\n",
		"",
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, text []byte) {
		path := filepath.Join(dir, "orbit.yaml")
		if err := os.WriteFile(path, text, 0o600); err != nil {
			t.Fatal(err)
		}
		core := Default()
		positions := map[string]string{}
		_, err := Load(Source{File: path, LookupEnv: noEnv, Positions: positions}, core, map[string]any{"tasks": &testSection{}})
		if err == nil {
			err = core.ValidateAt(positions)
		}
		if err == nil {
			return
		}
		for _, line := range strings.Split(strings.TrimSpace(err.Error()), "\n") {
			if line == "" {
				t.Fatalf("empty line in %q", err)
			}
		}
	})
}
