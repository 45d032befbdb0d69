module github.com/orbitrun/orbit/examples/result-inbox

go 1.26.8

require github.com/orbitrun/orbit/sdk/go v0.0.0

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/go-json-experiment/json v1.27.2 // indirect
	github.com/go-sql-driver/mysql v1.10.1 // indirect
)

replace github.com/orbitrun/orbit/sdk/go => ../../sdk/go
