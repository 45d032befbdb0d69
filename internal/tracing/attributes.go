package tracing

import "go.opentelemetry.io/otel/attribute"

// Span attributes naming Orbit's objects, shared by every module's spans.
// Ids and counts only: never task input, results, event contents or
// secrets.
const (
	AttrTaskID         = attribute.Key("orbit.task.id")
	AttrQueueID        = attribute.Key("orbit.queue.id")
	AttrAttemptID      = attribute.Key("orbit.attempt.id")
	AttrOutcome        = attribute.Key("orbit.task.outcome")
	AttrEventID        = attribute.Key("orbit.event.id")
	AttrEventType      = attribute.Key("orbit.event.type")
	AttrEventSequence  = attribute.Key("orbit.event.sequence")
	AttrDeliveryID     = attribute.Key("orbit.delivery.id")
	AttrSubscriptionID = attribute.Key("orbit.subscription.id")
	AttrSessionID      = attribute.Key("orbit.session.id")
)
