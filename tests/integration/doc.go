// Package integration holds the tests that need the platform and the
// result-inbox receiver together (seed 000 §6, R-1 … R-23): one temporary
// MySQL-compatible server per test binary with the platform database
// orbit_test and the receiver's own database orbit_receiver_test. Events are
// real result events appended by modules/tasks; the receiver side is the
// example's inbox and receiver packages and its cmd/receiver binary, run as
// real processes where a rule is about processes. The
// package has no code of its own; `make integration` and `make test` run it.
package integration
