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
	if len(items) == 0 {
		return nil, nil
	}
	digests := make([][32]byte, len(items))
	for i, it := range items {
		canonical, err := httpx.CanonicalJSON(it.Body)
		if err != nil {
			return nil, err
		}
		digests[i] = sha256.Sum256(canonical)
	}
	for try := 1; ; try++ {
		out, err := doItems(ctx, pool, credentialID, operation, items, digests, flush)
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

func doItems(ctx context.Context, pool *sql.DB, credentialID, operation string, items []Item, digests [][32]byte,
	flush func(context.Context, *sql.Tx) error) ([]ItemReceipt, error) {
	var out []ItemReceipt
	err := db.Tx(ctx, pool, func(tx *sql.Tx) error {
		out = make([]ItemReceipt, len(items))
		stored, err := recordsOf(ctx, tx, credentialID, operation, items)
		if err != nil {
			return err
		}
		now := db.Now()
		var values []string
		var args []any
		for i, it := range items {
			if rec, ok := stored[it.Key]; ok {
				if subtle.ConstantTimeCompare(rec.digest, digests[i][:]) != 1 {
					out[i].Err = httpx.Errorf(httpx.CodeIdempotencyConflict, "Idempotency-Key was already used with a different request")
					continue
				}
				out[i].Receipt = Receipt{Status: http.StatusOK, Data: withDeduplicated(rec.receipt, true), Deduplicated: true}
				continue
			}
			status, data, err := it.Change(ctx, tx)
			if err != nil {
				return err
			}
			body, err := json.Marshal(data)
			if err != nil {
				return fmt.Errorf("idem: encode receipt: %w", err)
			}
			if len(body) < 2 || body[0] != '{' || body[len(body)-1] != '}' {
				return fmt.Errorf("idem: receipt of %s is not a JSON object", operation)
			}
			values = append(values, "(?, ?, ?, ?, ?, ?, ?)")
			args = append(args, credentialID, operation, it.Key, digests[i][:], status, body, now)
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

// recordsOf reads the committed records of the items' keys.
func recordsOf(ctx context.Context, tx *sql.Tx, credentialID, operation string, items []Item) (map[string]storedRecord, error) {
	args := make([]any, 0, len(items)+2)
	args = append(args, credentialID, operation)
	for _, it := range items {
		args = append(args, it.Key)
	}
	rows, err := tx.QueryContext(ctx, `SELECT idem_key, request_digest, receipt FROM idempotency_records
		WHERE credential_id = ? AND operation = ? AND idem_key IN (?`+strings.Repeat(", ?", len(items)-1)+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("idem: read receipts: %w", err)
	}
	defer rows.Close()
	stored := map[string]storedRecord{}
	for rows.Next() {
		var key string
		var rec storedRecord
		if err := rows.Scan(&key, &rec.digest, &rec.receipt); err != nil {
			return nil, err
		}
		stored[key] = rec
	}
	return stored, rows.Err()
}
