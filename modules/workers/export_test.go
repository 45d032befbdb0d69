package workers

import "github.com/orbitrun/orbit/internal/wsx"

// The names below expose the package's internals to its external tests.

const (
	DefaultHeartbeatInterval = wsx.DefaultHeartbeatInterval
	DefaultLeaseDuration     = defaultLeaseDuration
	MaxCapacity              = maxCapacity
	MaxResume                = maxResume
	Subprotocol              = subprotocol
)
