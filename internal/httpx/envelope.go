package httpx

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/gorilla/mux"

	"github.com/orbitrun/orbit/internal/db"
)

// dataEnvelope is the body of a successful response (C-6).
type dataEnvelope struct {
	RequestID string `json:"request_id"`
	Data      any    `json:"data"`
}

// errorEnvelope is the body of a failed response (C-6).
type errorEnvelope struct {
	RequestID string    `json:"request_id"`
	Error     errorBody `json:"error"`
}

type errorBody struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

// internalMessage is the only message a client sees for an INTERNAL error.
const internalMessage = "internal error"

// ErrDatabaseUnavailable is what a client is told when the database cannot
// be reached: 503 UNAVAILABLE with Retry-After, on HTTP and in WebSocket
// error frames alike.
var ErrDatabaseUnavailable = &Error{Code: CodeUnavailable, Message: "the database is unavailable; retry later"}

// retryAfterSeconds is the Retry-After of CAPACITY_EXCEEDED and UNAVAILABLE:
// both are temporary, and a client should try again soon but not at once.
const retryAfterSeconds = "1"

// WriteData writes status and the envelope {"request_id": …, "data": data}.
// If data cannot be encoded, which is a bug, it writes an INTERNAL error
// instead and logs the cause.
func WriteData(w http.ResponseWriter, r *http.Request, status int, data any) {
	id := requestID(r)
	body, err := json.Marshal(dataEnvelope{RequestID: id, Data: data}, json.Deterministic(true))
	if err != nil {
		writeError(w, id, wireError(r, id, err))
		return
	}
	writeBody(w, id, status, body)
}

// WriteError writes the error envelope for err. An *Error found with
// errors.As is sent with its own code and message; context.DeadlineExceeded
// becomes UNAVAILABLE "request deadline exceeded" (C-12) and
// context.Canceled becomes UNAVAILABLE "request canceled"; an error that
// says the database cannot be reached (db.IsUnavailable) becomes
// ErrDatabaseUnavailable and is logged as a warning. Anything else is a bug:
// the client gets INTERNAL with a generic message and the error is logged
// with the request id. CAPACITY_EXCEEDED and UNAVAILABLE also set
// Retry-After: 1.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	id := requestID(r)
	e := wireError(r, id, err)
	stateFrom(r.Context()).setCode(e.Code)
	writeError(w, id, e)
}

// wireError returns what the client of request id is told about err,
// logging the cause when it is INTERNAL.
func wireError(r *http.Request, id string, err error) *Error {
	var e *Error
	switch {
	case errors.As(err, &e):
		if e == nil {
			return internalError(r, id, "WriteError called with a nil *Error")
		}
		return e
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: CodeUnavailable, Message: "request deadline exceeded"}
	case errors.Is(err, context.Canceled):
		return &Error{Code: CodeUnavailable, Message: "request canceled"}
	case db.IsUnavailable(err):
		logger(r, id).LogAttrs(r.Context(), slog.LevelWarn, "database unavailable", slog.String("error", err.Error()))
		return ErrDatabaseUnavailable
	case err == nil:
		return internalError(r, id, "WriteError called with a nil error")
	default:
		return internalError(r, id, err.Error())
	}
}

// internalError logs the cause of an INTERNAL error with the request id and
// returns the error the client sees.
func internalError(r *http.Request, id, cause string) *Error {
	logger(r, id).LogAttrs(r.Context(), slog.LevelError, "internal error", slog.String("error", cause))
	return &Error{Code: CodeInternal, Message: internalMessage}
}

// writeError writes e as it is, without classifying or logging it.
func writeError(w http.ResponseWriter, id string, e *Error) {
	body, err := json.Marshal(errorEnvelope{RequestID: id, Error: errorBody{Code: e.Code, Message: e.Message}})
	if err != nil {
		// Only invalid UTF-8 in the message can get here.
		body, _ = json.Marshal(errorEnvelope{RequestID: id, Error: errorBody{Code: e.Code, Message: strings.ToValidUTF8(e.Message, "\uFFFD")}})
	}
	if e.Code == CodeCapacityExceeded || e.Code == CodeUnavailable {
		w.Header().Set("Retry-After", retryAfterSeconds)
	}
	writeBody(w, id, e.Code.Status(), body)
}

// writeBody sets the C-6 headers and writes the encoded envelope.
func writeBody(w http.ResponseWriter, id string, status int, body []byte) {
	h := w.Header()
	h.Set("X-Request-ID", id)
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// NotFound returns the handler for requests that match no route, to be used
// as mux.Router.NotFoundHandler: 404 NOT_FOUND in the usual envelope.
func NotFound() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, requestID(r), &Error{Code: CodeNotFound, Message: "no route matches this path"})
	})
}

// MethodNotAllowed returns the handler for requests whose path matches a
// route but whose method does not, to be used as
// mux.Router.MethodNotAllowedHandler: 405 METHOD_NOT_ALLOWED in the usual
// envelope. When Middleware wraps a *mux.Router directly, the Allow header
// lists the methods the path accepts.
func MethodNotAllowed() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if st := stateFrom(r.Context()); st != nil {
			if router, ok := st.next.(*mux.Router); ok {
				if allow := allowedMethods(router, r); len(allow) > 0 {
					w.Header().Set("Allow", strings.Join(allow, ", "))
				}
			}
		}
		writeError(w, requestID(r), &Error{Code: CodeMethodNotAllowed, Message: "method not allowed for this route"})
	})
}

// probeMethods are the methods MethodNotAllowed tries when it builds the
// Allow header.
var probeMethods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions,
}

// allowedMethods returns the methods for which router has a route matching
// the path of r.
func allowedMethods(router *mux.Router, r *http.Request) []string {
	var allow []string
	for _, m := range probeMethods {
		probe := r.WithContext(r.Context())
		probe.Method = m
		var match mux.RouteMatch
		if router.Match(probe, &match) && match.MatchErr == nil {
			allow = append(allow, m)
		}
	}
	return allow
}
