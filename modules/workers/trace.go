package workers

// The spans of the workers module (O-5, docs/operations.md "Tracing").
const (
	tracerName   = "github.com/orbitrun/orbit/modules/workers"
	spanAssign   = "task.assign"
	spanComplete = "task.complete"
)
