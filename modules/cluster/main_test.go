package cluster_test

import (
	"testing"

	"github.com/orbitrun/orbit/internal/testkit/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }
