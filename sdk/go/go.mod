module github.com/orbitrun/orbit/sdk/go

go 1.26

require (
	github.com/gorilla/websocket v1.5.3
	go.uber.org/goleak v1.3.0
)
