package httpx

import (
	"fmt"
	"net/http"
)

// Code is a machine-readable error code from C-7. Clients branch on the code;
// the message that goes with it is for people.
type Code string

// The error codes of C-7.
const (
	CodeInvalidArgument     Code = "INVALID_ARGUMENT"
	CodeUnauthenticated     Code = "UNAUTHENTICATED"
	CodePermissionDenied    Code = "PERMISSION_DENIED"
	CodeNotFound            Code = "NOT_FOUND"
	CodeMethodNotAllowed    Code = "METHOD_NOT_ALLOWED"
	CodeStateConflict       Code = "STATE_CONFLICT"
	CodeIdempotencyConflict Code = "IDEMPOTENCY_CONFLICT"
	CodeSubscriptionLimit   Code = "SUBSCRIPTION_LIMIT"
	CodeEventHistoryExpired Code = "EVENT_HISTORY_EXPIRED"
	CodeProtocolRequired    Code = "PROTOCOL_REQUIRED"
	CodeCapacityExceeded    Code = "CAPACITY_EXCEEDED"
	CodeUnavailable         Code = "UNAVAILABLE"
	CodeInternal            Code = "INTERNAL"
)

// The error codes of the WebSocket protocols (C-7): they travel in a frame's
// error, never as an HTTP status, so Status maps them to 500.
const (
	// CodeTaskLeaseLost answers a worker's proof that is not the task's
	// current lease (T-5). A wrong secret gets the same answer.
	CodeTaskLeaseLost Code = "TASK_LEASE_LOST"
	// CodeDeliveryLeaseLost answers an event ACK whose proof is not the
	// delivery's latest lease. A wrong secret gets the same answer.
	CodeDeliveryLeaseLost Code = "DELIVERY_LEASE_LOST"
	// CodeSubscriptionDeleted tells an event connection that its
	// subscription was deleted (K-11); the connection then closes 1000.
	CodeSubscriptionDeleted Code = "SUBSCRIPTION_DELETED"
)

// Status returns the HTTP status of the code. An unknown code is a bug in
// the server and maps to 500.
func (c Code) Status() int {
	switch c {
	case CodeInvalidArgument:
		return http.StatusBadRequest
	case CodeUnauthenticated:
		return http.StatusUnauthorized
	case CodePermissionDenied:
		return http.StatusForbidden
	case CodeNotFound:
		return http.StatusNotFound
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case CodeStateConflict, CodeIdempotencyConflict, CodeSubscriptionLimit:
		return http.StatusConflict
	case CodeEventHistoryExpired:
		return http.StatusGone
	case CodeProtocolRequired:
		return http.StatusUpgradeRequired
	case CodeCapacityExceeded:
		return http.StatusTooManyRequests
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// Error is an error that is sent to the client as it is: its code selects
// the HTTP status and its message is shown to people. The message must never
// contain secrets (tokens, lease secrets, task input or results).
type Error struct {
	Code    Code
	Message string
}

// Error returns the code and the message, for logs and tests.
func (e *Error) Error() string {
	return string(e.Code) + ": " + e.Message
}

// Errorf returns an *Error with the code and a message formatted like
// fmt.Sprintf. The message never wraps another error: callers that need the
// cause for diagnosis should log it themselves.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

var _ error = (*Error)(nil)
