package db_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/orbitrun/orbit/internal/testkit/testdb"
)

func TestMain(m *testing.M) {
	code := testdb.Run(m)
	if err := stopFailoverPair(); err != nil {
		fmt.Fprintf(os.Stderr, "failover servers: %v\n", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
