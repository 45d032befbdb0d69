package idem

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
)

// Item is one write of a batch, idempotent on its own key: the key is
// scoped to the credential and Operation exactly as a single request's
// Idempotency-Key is, so a batch item and a single request with the same
// key and body are the same write.
type Item struct {
	Key string
	// Body is the JSON that identifies the write, digested as a single
	// request's body is (its canonical form).
	Body []byte
	// Change performs the write, in the batch's transaction.
	Change Change
}

// ItemReceipt answers one item: its receipt, or Err when the key was used
// with another body (IDEMPOTENCY_CONFLICT).
type ItemReceipt struct {
	Receipt
	Err error
}

// maxItemsTries bounds how often DoItems runs its transaction again after
// a concurrent request committed one of its keys first.
const maxItemsTries = 3

// errItemRace reports that a key of the batch was committed by another
// request between the batch's look-up and its insert.
var errItemRace = errors.New("idem: a key of the batch was used concurrently")

// DoItems runs the changes of items, each exactly once per (credential,
// operation, key), in one transaction with one commit. An item whose key
// already has a record gets the original receipt (deduplicated) when its
// body is the same, IDEMPOTENCY_CONFLICT otherwise, and its change does not
// run; every other item's change runs and its record is stored with its
// receipt in the same transaction. The keys of items must be distinct. An
// error means nothing was changed. flush, when not nil, runs in the
// transaction after the changes and before the records are stored, so that
// changes may stage their rows for it to write with one statement.
func DoItems(ctx context.Context, pool *sql.DB, credentialID, operation string, items []Item, flush func(context.Context, *sql.Tx) error) ([]ItemReceipt, error) {
	writes := make([]ScopedItem, len(items))
	for i, it := range items {
		writes[i] = ScopedItem{CredentialID: credentialID, Operation: operation, Item: it}
	}
	return DoScoped(ctx, pool, writes, flush)
}

// ScopedItem is an item with its own scope: the items of DoScoped may come
// from different credentials and operations, as requests that arrived
// together do.
type ScopedItem struct {
	CredentialID string
	Operation    string
	Item
}

// scope is what a key is unique within.
type scope struct{ credentialID, operation string }

func (w *ScopedItem) scope() scope { return scope{w.CredentialID, w.Operation} }

// DoScoped is DoItems for writes of any scopes: each exactly once per
// (credential, operation, key), all in one transaction with one commit.
// The keys of writes of one scope must be distinct.
func DoScoped(ctx context.Context, pool *sql.DB, writes []ScopedItem, flush func(context.Context, *sql.Tx) error) ([]ItemReceipt, error) {
	if len(writes) == 0 {
		return nil, nil
	}
	digests := make([][32]byte, len(writes))
	for i, w := range writes {
		canonical, err := httpx.CanonicalJSON(w.Body)
		if err != nil {
			return nil, err
		}
		digests[i] = sha256.Sum256(canonical)
	}
	for try := 1; ; try++ {
		out, err := doScoped(ctx, pool, writes, digests, flush)
		if errors.Is(err, errItemRace) && try < maxItemsTries {
			continue
		}
		if errors.Is(err, errItemRace) {
			return nil, httpx.Errorf(httpx.CodeUnavailable, "concurrent requests used the same idempotency keys; retry")
		}
		return out, err
	}
}

type storedRecord struct {
	digest  []byte
	receipt []byte
}

func doScoped(ctx context.Context, pool *sql.DB, writes []ScopedItem, digests [][32]byte,
	flush func(context.Context, *sql.Tx) error) ([]ItemReceipt, error) {
	var out []ItemReceipt
	err := db.Tx(ctx, pool, func(tx *sql.Tx) error {
		out = make([]ItemReceipt, len(writes))
		stored, err := recordsOf(ctx, tx, writes)
		if err != nil {
			return err
		}
		now := db.Now()
		var values []string
		var args []any
		for i, w := range writes {
			if rec, ok := stored[w.scope()][w.Key]; ok {
				if subtle.ConstantTimeCompare(rec.digest, digests[i][:]) != 1 {
					out[i].Err = httpx.Errorf(httpx.CodeIdempotencyConflict, "Idempotency-Key was already used with a different request")
					continue
				}
				out[i].Receipt = Receipt{Status: http.StatusOK, Data: withDeduplicated(rec.receipt, true), Deduplicated: true}
				continue
			}
			status, data, err := w.Change(ctx, tx)
			if err != nil {
				return err
			}
			body, err := json.Marshal(data)
			if err != nil {
				return fmt.Errorf("idem: encode receipt: %w", err)
			}
			if len(body) < 2 || body[0] != '{' || body[len(body)-1] != '}' {
				return fmt.Errorf("idem: receipt of %s is not a JSON object", w.Operation)
			}
			values = append(values, "(?, ?, ?, ?, ?, ?, ?)")
			args = append(args, w.CredentialID, w.Operation, w.Key, digests[i][:], status, body, now)
			out[i].Receipt = Receipt{Status: status, Data: withDeduplicated(body, false)}
		}
		if len(values) == 0 {
			return nil
		}
		if flush != nil {
			if err := flush(ctx, tx); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO idempotency_records
			(credential_id, operation, idem_key, request_digest, status, receipt, created_at)
			VALUES `+strings.Join(values, ", "), args...)
		if db.IsDuplicateKey(err) {
			return errItemRace
		}
		return err
	})
	return out, err
}

// recordsOf reads the committed records of the writes' keys, one statement
// per scope, by scope and key.
func recordsOf(ctx context.Context, tx *sql.Tx, writes []ScopedItem) (map[scope]map[string]storedRecord, error) {
	keys := map[scope][]any{}
	var scopes []scope
	for _, w := range writes {
		sc := w.scope()
		if _, ok := keys[sc]; !ok {
			scopes = append(scopes, sc)
		}
		keys[sc] = append(keys[sc], w.Key)
	}
	stored := make(map[scope]map[string]storedRecord, len(scopes))
	for _, sc := range scopes {
		args := append([]any{sc.credentialID, sc.operation}, keys[sc]...)
		rows, err := tx.QueryContext(ctx, `SELECT idem_key, request_digest, receipt FROM idempotency_records
			WHERE credential_id = ? AND operation = ? AND idem_key IN (`+db.Placeholders(len(keys[sc]))+`)`, args...)
		if err != nil {
			return nil, fmt.Errorf("idem: read receipts: %w", err)
		}
		records := map[string]storedRecord{}
		for rows.Next() {
			var key string
			var rec storedRecord
			if err := rows.Scan(&key, &rec.digest, &rec.receipt); err != nil {
				rows.Close()
				return nil, err
			}
			records[key] = rec
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		stored[sc] = records
	}
	return stored, nil
}
