//go:build soak

package soak_test

// testdb migrates the schema of every module linked into the test binary.
import _ "github.com/orbitrun/orbit/modules/all"
