package cli

// The modules of the orbit binary.
import _ "github.com/orbitrun/orbit/modules/all"
