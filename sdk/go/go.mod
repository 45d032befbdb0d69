module github.com/orbitrun/orbit/sdk/go

go 1.26.8
