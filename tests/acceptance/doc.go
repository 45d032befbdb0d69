// Package acceptance holds slow end-to-end tests of tasks and workers: a real
// server (in process, or the orbit binary as a child process), real sockets,
// the Go SDK's client and worker, and checks made directly in the database.
// The package has no code of its own; its tests run with the others under
// `go test ./...`.
package acceptance
