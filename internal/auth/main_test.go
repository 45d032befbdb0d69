package auth_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine running (F-7).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
