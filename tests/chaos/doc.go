// Package chaos is `make chaos` (F-1): it drives the real orbit binary, SDK
// workers and consumers in processes of their own, and the result-inbox
// example's `receiver consume`, at a steady offered load, injects faults
// into every one of them and into the database, and checks in both
// databases that no result was lost or applied twice.
//
// Its files build only with the chaos tag, so `make test` neither compiles
// nor runs them; `make chaos` runs
//
//	go test -tags chaos -run TestF1 -v ./tests/chaos -args -chaos.rate=100
//
// and `go test -tags chaos ./tests/chaos -args -h` lists the knobs.
package chaos
