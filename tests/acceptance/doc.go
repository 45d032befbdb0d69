// Package acceptance holds slow end-to-end tests of tasks, workers and
// consumers: a real server (in process, or the orbit binary as child
// processes, several on one database for N-5), real sockets, the Go SDK's
// client, worker and consumer, and checks made directly in the database.
// The package has no code of its own; its tests run with the others under
// `go test ./...`.
package acceptance
