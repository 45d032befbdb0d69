package cli

// The modules of the orbit binary. Adding a module to the binary is one line
// here.
import (
	_ "github.com/orbitrun/orbit/modules/admin"
)
