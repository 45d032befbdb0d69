package server

import (
	"os"
	"runtime/debug"
	"testing"
)

// keepGCPercent restores the process's GC target and GOGC after t.
func keepGCPercent(t *testing.T) {
	before := debug.SetGCPercent(100)
	debug.SetGCPercent(before)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	t.Setenv("GOGC", "") // restored after t
}

func TestSetGCPercent_SetsTheConfiguredTarget(t *testing.T) {
	keepGCPercent(t)
	if err := os.Unsetenv("GOGC"); err != nil {
		t.Fatal(err)
	}
	percent, source := SetGCPercent(400)
	if percent != 400 || source != "server.gc_percent" {
		t.Fatalf("SetGCPercent(400) = %d, %q", percent, source)
	}
	if got := debug.SetGCPercent(100); got != 400 {
		t.Fatalf("target in effect %d, want 400", got)
	}
}

func TestSetGCPercent_GOGCWins(t *testing.T) {
	keepGCPercent(t)
	t.Setenv("GOGC", "150")
	debug.SetGCPercent(150) // as the runtime read it at start
	percent, source := SetGCPercent(400)
	if percent != 150 || source != "GOGC" {
		t.Fatalf("SetGCPercent(400) with GOGC=150 = %d, %q", percent, source)
	}
	if got := debug.SetGCPercent(100); got != 150 {
		t.Fatalf("target in effect %d, want 150", got)
	}
}
