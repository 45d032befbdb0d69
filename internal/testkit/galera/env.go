package galera

import (
	"os"
	"strings"
	"testing"
)

// EnvNodes names the variable that lists the DSNs of every node of a
// running cluster, node 0 first, separated by commas. make test-galera
// (internal/testkit/galerarun) sets it for the tests it runs.
const EnvNodes = "ORBIT_TEST_GALERA"

// NodesFromEnv returns the node DSNs that EnvNodes lists, or skips the test
// when it is not set; fewer than min nodes fail the test.
func NodesFromEnv(t testing.TB, min int) []string {
	t.Helper()
	list := os.Getenv(EnvNodes)
	if list == "" {
		t.Skipf("needs a Galera cluster: %s lists its nodes' DSNs (make test-galera sets it)", EnvNodes)
	}
	dsns := strings.Split(list, ",")
	if len(dsns) < min {
		t.Fatalf("%s names %d node(s); want at least %d", EnvNodes, len(dsns), min)
	}
	return dsns
}
