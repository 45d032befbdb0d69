// Package idem makes management writes idempotent (C-13, C-14).
//
// A write runs inside one transaction that performs the change and then
// inserts its idempotency record, with the receipt, keyed by (credential,
// operation, key). Of concurrent requests with the same key exactly one
// commits: the others' inserts block on that unique key until the first
// commits, fail as duplicates, roll their change back and read the
// committed record. A concurrent request whose change fails because the
// first's change came before it (a second cancel of the same task, say)
// also looks for the record and replays it. The receipt is stored in the
// same transaction as the change it guards, so a crash never leaves one
// without the other.
//
// Failed writes store nothing: a request that got an error may be retried with
// the same key and is evaluated afresh.
package idem

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
)

// Request identifies one idempotent write.
type Request struct {
	CredentialID string
	// Operation is the method, route and path IDs, e.g.
	// "POST /v1/subscriptions/<id>:configure".
	Operation string
	Key       string
	// Body is the raw request JSON; its canonical form is what identifies the
	// request, so key order and whitespace do not matter.
	Body []byte
}

// Receipt is what a write returned the first time.
type Receipt struct {
	// Status is the HTTP status of the first reply; a replay is always 200.
	Status int
	// Data is the JSON object returned, with "deduplicated" set to false the
	// first time and true on a replay.
	Data json.RawMessage
	// Deduplicated is true when this is a replay.
	Deduplicated bool
}

// Change performs the guarded write in tx and returns the HTTP status and the
// JSON object to return (without "deduplicated", which Do adds).
type Change func(ctx context.Context, tx *sql.Tx) (status int, data any, err error)

// Do runs change exactly once per (credential, operation, key). A repeat with
// the same canonical body returns the original receipt; a repeat with another
// body returns 409 IDEMPOTENCY_CONFLICT.
func Do(ctx context.Context, pool *sql.DB, req Request, change Change) (Receipt, error) {
	canonical, err := httpx.CanonicalJSON(req.Body)
	if err != nil {
		return Receipt{}, err
	}
	digest := sha256.Sum256(canonical)
	var receipt Receipt
	err = db.Tx(ctx, pool, func(tx *sql.Tx) error {
		status, data, err := change(ctx, tx)
		if err != nil {
			return err
		}
		body, err := json.Marshal(data)
		if err != nil {
			return fmt.Errorf("idem: encode receipt: %w", err)
		}
		if len(body) < 2 || body[0] != '{' || body[len(body)-1] != '}' {
			return fmt.Errorf("idem: receipt of %s is not a JSON object", req.Operation)
		}
		// The record is written once, after the change, with its receipt:
		// one statement instead of a placeholder and its update.
		_, err = tx.ExecContext(ctx, `
			INSERT INTO idempotency_records (credential_id, operation, idem_key, request_digest, status, receipt, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`,
			req.CredentialID, req.Operation, req.Key, digest[:], status, body, db.Now())
		if db.IsDuplicateKey(err) {
			return errReplay
		}
		if err != nil {
			return err
		}
		receipt = Receipt{Status: status, Data: withDeduplicated(body, false)}
		return nil
	})
	if errors.Is(err, errReplay) {
		return replay(ctx, pool, req, digest)
	}
	var refused *httpx.Error
	if errors.As(err, &refused) {
		// The change was refused; if a request with the same key committed
		// first, its change is why, and this is its repeat.
		if receipt, found, lookErr := recorded(ctx, pool, req, digest); found {
			return receipt, lookErr
		}
	}
	if err != nil {
		return Receipt{}, err
	}
	return receipt, nil
}

// errReplay reports that the key's record already exists: another request
// with the same key committed first. A duplicate key raised by the change
// itself is the change's own error and is returned as it is.
var errReplay = errors.New("idem: key already used")

// replay reads the committed record of a key that another transaction wrote.
func replay(ctx context.Context, pool *sql.DB, req Request, digest [32]byte) (Receipt, error) {
	receipt, found, err := recorded(ctx, pool, req, digest)
	if err == nil && !found {
		// The winner rolled back between our duplicate error and this read:
		// nothing was changed, the client may simply retry.
		return Receipt{}, httpx.Errorf(httpx.CodeUnavailable, "a concurrent request with this Idempotency-Key did not complete; retry")
	}
	return receipt, err
}

// recorded reads the committed record of a key: its receipt as a replay,
// IDEMPOTENCY_CONFLICT when it was written for another request, found
// false when there is none.
func recorded(ctx context.Context, pool *sql.DB, req Request, digest [32]byte) (_ Receipt, found bool, _ error) {
	var (
		stored []byte
		status int
		body   []byte
	)
	err := pool.QueryRowContext(ctx, `
		SELECT request_digest, status, receipt FROM idempotency_records
		WHERE credential_id = ? AND operation = ? AND idem_key = ?`,
		req.CredentialID, req.Operation, req.Key).Scan(&stored, &status, &body)
	if errors.Is(err, sql.ErrNoRows) {
		return Receipt{}, false, nil
	}
	if err != nil {
		return Receipt{}, false, fmt.Errorf("idem: read receipt: %w", err)
	}
	if subtle.ConstantTimeCompare(stored, digest[:]) != 1 {
		return Receipt{}, true, httpx.Errorf(httpx.CodeIdempotencyConflict, "Idempotency-Key was already used with a different request")
	}
	return Receipt{Status: http.StatusOK, Data: withDeduplicated(body, true), Deduplicated: true}, true, nil
}

// withDeduplicated appends the "deduplicated" member to a JSON object.
func withDeduplicated(object []byte, dedup bool) json.RawMessage {
	member := []byte(`"deduplicated":false}`)
	if dedup {
		member = []byte(`"deduplicated":true}`)
	}
	out := bytes.TrimSuffix(bytes.Clone(object), []byte("}"))
	if len(bytes.TrimSpace(out)) > 1 {
		out = append(out, ',')
	}
	return append(out, member...)
}

// Handle is the HTTP form of Do: it reads the Idempotency-Key header and
// writes the receipt (or the error) in the envelope.
func Handle(w http.ResponseWriter, r *http.Request, pool *sql.DB, credentialID string, body []byte, change Change) {
	key, err := httpx.IdempotencyKey(r)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	receipt, err := Do(r.Context(), pool, Request{
		CredentialID: credentialID,
		Operation:    r.Method + " " + r.URL.Path,
		Key:          key,
		Body:         body,
	}, change)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	httpx.WriteData(w, r, receipt.Status, receipt.Data)
}

// Write is the skeleton of an idempotent write endpoint: it reads the body
// into req (httpx.ReadJSON: no query, strict JSON), calls prepare with the
// caller's principal to check the request and load what it acts on, and
// runs the change prepare returns once per Idempotency-Key (Handle). The
// first error of these steps is written in the envelope; prepare does not
// run when the body is refused, and no change runs when prepare fails.
func Write(w http.ResponseWriter, r *http.Request, pool *sql.DB, req any, prepare func(p *auth.Principal) (Change, error)) {
	write(w, r, pool, req, httpx.ReadJSON, prepare)
}

// WriteOptional is Write for an endpoint whose body has no required field:
// an empty body, sent without Content-Type, is read as {}
// (httpx.ReadOptionalJSON), and a repeat of it with {} is the same request.
func WriteOptional(w http.ResponseWriter, r *http.Request, pool *sql.DB, req any, prepare func(p *auth.Principal) (Change, error)) {
	write(w, r, pool, req, httpx.ReadOptionalJSON, prepare)
}

func write(w http.ResponseWriter, r *http.Request, pool *sql.DB, req any, read func(*http.Request, any) ([]byte, error), prepare func(p *auth.Principal) (Change, error)) {
	item, ok := Prepare(w, r, req, read, prepare)
	if !ok {
		return
	}
	receipt, err := Do(r.Context(), pool, Request{CredentialID: item.CredentialID, Operation: item.Operation, Key: item.Key, Body: item.Body}, item.Change)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	httpx.WriteData(w, r, receipt.Status, receipt.Data)
}

// Prepare runs the steps of an idempotent write that come before its
// change, in Write's order: it reads the body into req with read, calls
// prepare with the caller's principal, and takes the Idempotency-Key. It
// returns the write, scoped to the caller's credential and to the method
// and path, for a caller that runs it itself (with others, DoScoped); on
// the first error it writes the envelope and returns false.
func Prepare(w http.ResponseWriter, r *http.Request, req any, read func(*http.Request, any) ([]byte, error), prepare func(p *auth.Principal) (Change, error)) (ScopedItem, bool) {
	raw, err := read(r, req)
	if err != nil {
		httpx.WriteError(w, r, err)
		return ScopedItem{}, false
	}
	p := auth.FromContext(r.Context())
	change, err := prepare(p)
	if err != nil {
		httpx.WriteError(w, r, err)
		return ScopedItem{}, false
	}
	key, err := httpx.IdempotencyKey(r)
	if err != nil {
		httpx.WriteError(w, r, err)
		return ScopedItem{}, false
	}
	return ScopedItem{CredentialID: p.CredentialID, Operation: r.Method + " " + r.URL.Path,
		Item: Item{Key: key, Body: raw, Change: change}}, true
}
