// Command orbit-admin is an alias for `orbit admin`, kept because the
// result-inbox guide runs `go run ./cmd/orbit-admin bootstrap …`.
package main

import (
	"os"

	"github.com/orbitrun/orbit/cmd/orbit/cli"
)

func main() {
	root := cli.NewRoot()
	root.SetArgs(append([]string{"admin"}, os.Args[1:]...))
	cli.Execute(root)
}
