package tasks

// The span of the tasks module (O-5, docs/operations.md "Tracing").
const (
	tracerName = "github.com/orbitrun/orbit/modules/tasks"
	spanSubmit = "task.submit"
)
