package httpx

import (
	"errors"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Query returns the URL query parameters of r (C-9). Only the allowed names
// are accepted, each at most once and with a non-empty value; anything else,
// including a malformed query string, is a 400 INVALID_ARGUMENT *Error.
// An endpoint that takes no parameters calls Query(r) to reject any.
// Messages never repeat parameter values.
//
// A '?' must introduce parameters: a bare '?' and empty pieces ("?&",
// "a=1&&b=2", a trailing '&') are malformed, on HTTP routes and WebSocket
// upgrades alike. Such a URL is what a client builds when it drops a value,
// and the SDK refuses a base URL with a bare '?' as a query.
func Query(r *http.Request, allowed ...string) (map[string]string, error) {
	values, err := url.ParseQuery(r.URL.RawQuery)
	if err == nil && hasEmptyPiece(r.URL) {
		err = errors.New("empty query")
	}
	if err != nil {
		return nil, &Error{Code: CodeInvalidArgument, Message: "malformed query string"}
	}
	q := make(map[string]string, len(values))
	for _, name := range slices.Sorted(maps.Keys(values)) {
		vs := values[name]
		switch {
		case !slices.Contains(allowed, name):
			if quotable(name) {
				return nil, Errorf(CodeInvalidArgument, "unknown query parameter %q", name)
			}
			return nil, &Error{Code: CodeInvalidArgument, Message: "unknown query parameter"}
		case len(vs) > 1:
			return nil, Errorf(CodeInvalidArgument, "query parameter %q must be given at most once", name)
		case vs[0] == "":
			return nil, Errorf(CodeInvalidArgument, "query parameter %q must not be empty", name)
		}
		q[name] = vs[0]
	}
	return q, nil
}

// hasEmptyPiece reports whether u has a '?' without a parameter after it,
// or an empty piece between '&'s, which url.ParseQuery skips.
func hasEmptyPiece(u *url.URL) bool {
	if u.ForceQuery {
		return true
	}
	if u.RawQuery == "" {
		return false
	}
	for piece := range strings.SplitSeq(u.RawQuery, "&") {
		if piece == "" {
			return true
		}
	}
	return false
}

// quotable reports whether an unknown parameter name is short and plain
// enough to repeat in a message. Longer names might be a secret pasted
// into the URL.
func quotable(name string) bool {
	return ValidName(name, 32)
}

// Limit parameters for lists (C-16).
const (
	defaultLimit = 20
	maxLimit     = 100
)

// Limit returns the "limit" parameter of a list from q as returned by Query:
// 20 when absent, otherwise a canonical decimal from 1 to 100. Anything else
// is a 400 INVALID_ARGUMENT *Error.
func Limit(q map[string]string) (int, error) {
	s, ok := q["limit"]
	if !ok {
		return defaultLimit, nil
	}
	n, err := ParseUint64(s)
	if err != nil || n < 1 || n > maxLimit {
		return 0, &Error{Code: CodeInvalidArgument, Message: "query parameter \"limit\" must be an integer from 1 to 100 without sign or leading zero"}
	}
	return int(n), nil
}

// MaxOlderThanMS bounds the older_than_ms parameter of the stuck-work
// reports (K-14): a year.
const MaxOlderThanMS = 365 * 24 * 3600 * 1000

// OlderThan returns the "older_than_ms" parameter of a stuck-work report
// (K-14) from q as returned by Query: ok false when absent; otherwise a
// canonical decimal from 0 to MaxOlderThanMS, accepted only when the
// "state" parameter is inFlight. Anything else is a 400 INVALID_ARGUMENT
// *Error.
func OlderThan(q map[string]string, inFlight string) (d time.Duration, ok bool, err error) {
	s, ok := q["older_than_ms"]
	if !ok {
		return 0, false, nil
	}
	if q["state"] != inFlight {
		return 0, false, Errorf(CodeInvalidArgument, "older_than_ms requires state=%s", inFlight)
	}
	n, err := ParseUint64(s)
	if err != nil || n > MaxOlderThanMS {
		return 0, false, Errorf(CodeInvalidArgument, "older_than_ms must be a decimal from 0 to %d", MaxOlderThanMS)
	}
	return time.Duration(n) * time.Millisecond, true, nil
}
