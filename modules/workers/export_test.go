package workers

// The names below expose the package's internals to its external tests.

const (
	DefaultHeartbeatInterval = defaultHeartbeatInterval
	DefaultLeaseDuration     = defaultLeaseDuration
	MaxCapacity              = maxCapacity
	MaxResume                = maxResume
	Subprotocol              = subprotocol
)
