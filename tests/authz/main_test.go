package authz_test

import (
	"testing"

	"github.com/orbitrun/orbit/internal/testkit/testdb"
)

// TestMain runs the tests on test databases and checks for leaked
// goroutines afterwards (testdb.Main).
func TestMain(m *testing.M) { testdb.Main(m) }
