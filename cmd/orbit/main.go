// Command orbit is the Orbit server, admin tool and receiver in one binary.
package main

import "github.com/orbitrun/orbit/cmd/orbit/cli"

func main() { cli.Execute(cli.NewRoot()) }
