// Package soak is `make soak` (F-5): 128 SDK event consumers stay connected
// to one server under a steady load for a long time (10 minutes by
// default), and the process's goroutines and RSS after warm-up and at the
// end must be within 10 % of each other.
//
// Its files build only with the soak tag, so `make test` neither compiles
// nor runs them; `make soak SOAK_DURATION=2m` shortens the run.
package soak
