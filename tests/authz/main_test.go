package authz_test

import (
	"fmt"
	"net/http"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/orbitrun/orbit/internal/testkit/testdb"
)

func TestMain(m *testing.M) {
	code := testdb.Run(m)
	if code == 0 {
		// Keep-alive connections of the shared HTTP client end with the
		// test servers; their goroutines are not leaks of the code under
		// test.
		http.DefaultClient.CloseIdleConnections()
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
