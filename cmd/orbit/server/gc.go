package server

import (
	"os"
	"runtime/debug"
)

// SetGCPercent sets the garbage collector's target of this process to
// percent (server.gc_percent), unless the GOGC environment variable is set:
// an operator's GOGC wins, as for any Go program. It returns the target in
// effect (-1 for off) and its source, "GOGC" or "server.gc_percent", for
// the log.
//
// A server's live heap is small (tens of MiB) and it allocates for every
// frame and statement, so at Go's default of 100 the collector runs often;
// a higher target trades some memory for CPU. GOMEMLIMIT, when set, still
// bounds the heap.
func SetGCPercent(percent int) (int, string) {
	if _, ok := os.LookupEnv("GOGC"); ok {
		// Reading the target means setting one: put it back at once.
		current := debug.SetGCPercent(-1)
		debug.SetGCPercent(current)
		return current, "GOGC"
	}
	debug.SetGCPercent(percent)
	return percent, "server.gc_percent"
}
