//go:build chaos

package chaos_test

// testdb migrates the schema of every module linked into the test binary.
import _ "github.com/orbitrun/orbit/modules/all"
