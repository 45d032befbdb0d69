// Package integration holds the tests that need the platform and the
// result-inbox receiver together (seed 000 §6, R-19 … R-21): one temporary
// MySQL-compatible server per test binary with the platform database
// orbit_test and the receiver's own database orbit_receiver_test. Events
// are real result events appended by modules/tasks and read back as a
// subscriber receives them; the receiver side is the example's inbox
// package. The package has no code of its own; `make integration` runs it.
package integration
