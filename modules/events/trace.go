package events

// The span of the events module (O-5, docs/operations.md "Tracing").
const (
	tracerName  = "github.com/orbitrun/orbit/modules/events"
	spanDeliver = "event.deliver"
)
