package orbit

import (
	"errors"
	"fmt"
)

// Error codes sent by the Orbit API. Clients branch on the code; the message
// that comes with it is for people.
const (
	CodeInvalidArgument     = "INVALID_ARGUMENT"
	CodeUnauthenticated     = "UNAUTHENTICATED"
	CodePermissionDenied    = "PERMISSION_DENIED"
	CodeNotFound            = "NOT_FOUND"
	CodeMethodNotAllowed    = "METHOD_NOT_ALLOWED"
	CodeStateConflict       = "STATE_CONFLICT"
	CodeIdempotencyConflict = "IDEMPOTENCY_CONFLICT"
	CodeSubscriptionLimit   = "SUBSCRIPTION_LIMIT"
	CodeEventHistoryExpired = "EVENT_HISTORY_EXPIRED"
	CodeProtocolRequired    = "PROTOCOL_REQUIRED"
	CodeCapacityExceeded    = "CAPACITY_EXCEEDED"
	CodeUnavailable         = "UNAVAILABLE"
	CodeInternal            = "INTERNAL"
	// CodeTaskLeaseLost answers a task.complete or task.release whose proof
	// no longer holds the task's lease. The connection stays open.
	CodeTaskLeaseLost = "TASK_LEASE_LOST"
	// CodeDeliveryLeaseLost answers an event acknowledgement whose proof no
	// longer holds the delivery. The connection stays open.
	CodeDeliveryLeaseLost = "DELIVERY_LEASE_LOST"
)

// APIError is an error answered by the Orbit server, either in the HTTP
// envelope or in a WebSocket error frame. Callers find it with errors.As
// and branch on Code.
//
// An HTTP response that is not an Orbit envelope (for example an HTML page
// from a proxy) is also reported as an *APIError, with its Status and an
// empty Code. Network failures are never an *APIError.
type APIError struct {
	// Status is the HTTP status of the response, or 0 for an error that
	// arrived in a WebSocket frame.
	Status int
	// Code is the machine-readable error code, one of the Code constants.
	Code string
	// Message explains the error to people.
	Message string
	// RequestID identifies the request in the server's logs, when known.
	RequestID string
}

// Error returns the code, the message, the status and the request id.
func (e *APIError) Error() string {
	code := e.Code
	if code == "" {
		code = "unexpected response"
	}
	s := "orbit: " + code
	if e.Message != "" {
		s += ": " + e.Message
	}
	switch {
	case e.Status != 0 && e.RequestID != "":
		s += fmt.Sprintf(" (status %d, request %s)", e.Status, e.RequestID)
	case e.Status != 0:
		s += fmt.Sprintf(" (status %d)", e.Status)
	case e.RequestID != "":
		s += fmt.Sprintf(" (request %s)", e.RequestID)
	}
	return s
}

// IsCode reports whether err is, or wraps, an *APIError with the given
// code. It is false for a nil error and for an empty code.
func IsCode(err error, code string) bool {
	var e *APIError
	return code != "" && errors.As(err, &e) && e.Code == code
}

var _ error = (*APIError)(nil)
