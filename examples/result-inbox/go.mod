module github.com/orbitrun/orbit/examples/result-inbox

go 1.26

require (
	github.com/go-json-experiment/json v1.27.2
	github.com/go-sql-driver/mysql v1.10.1
	github.com/orbitrun/orbit/sdk/go v0.0.0
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/gorilla/websocket v1.5.3 // indirect
)

replace github.com/orbitrun/orbit/sdk/go => ../../sdk/go
