// Package httpx holds the HTTP conventions that every Orbit endpoint shares
// (spec 02, rules C-6 to C-16): the response envelope and error codes, the
// request middleware, strict JSON decoding, canonical JSON for idempotency
// digests, query parameters, canonical value formats, idempotency keys and
// list cursors.
//
// Handlers are expected to return errors of type *Error for anything the
// client did wrong and to pass every error to WriteError, which maps it to
// the envelope and status of C-7.
package httpx
