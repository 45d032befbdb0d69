package httpx

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"time"

	"github.com/orbitrun/orbit/internal/db"
)

// ReadJSON is the body reading of a write endpoint: it rejects any query
// parameter (C-9), reads the body, decodes it into dst under the rules of
// C-8 and returns the raw bytes, which the idempotency digest is taken of.
func ReadJSON(r *http.Request, dst any) ([]byte, error) {
	return readJSON(r, dst, false)
}

// ReadOptionalJSON is ReadJSON for an endpoint whose body has no required
// field: an empty body needs no Content-Type and reads as {}, and {} is also
// what it returns as the raw bytes, so an empty body and {} are the same
// request to the idempotency digest. A Content-Type that is sent must still
// be application/json.
func ReadOptionalJSON(r *http.Request, dst any) ([]byte, error) {
	return readJSON(r, dst, true)
}

func readJSON(r *http.Request, dst any, emptyIsObject bool) ([]byte, error) {
	if _, err := Query(r); err != nil {
		return nil, err
	}
	raw, err := readBody(r)
	if err != nil {
		return nil, err
	}
	if emptyIsObject && len(raw) == 0 {
		if len(r.Header.Values("Content-Type")) > 0 {
			if err := checkContentType(r.Header.Values("Content-Type")); err != nil {
				return nil, err
			}
		}
		raw = []byte("{}")
		return raw, decodeJSON(raw, dst, "request body")
	}
	r.Body = io.NopCloser(bytes.NewReader(raw))
	if err := DecodeJSON(r, dst); err != nil {
		return nil, err
	}
	return raw, nil
}

// CursorParam decodes the optional cursor query parameter of a list bound to
// binding (C-16); it returns nil when the parameter is absent.
func CursorParam(q map[string]string, binding string) (*Cursor, error) {
	s, ok := q["cursor"]
	if !ok {
		return nil, nil
	}
	c, err := DecodeCursor(s, binding)
	if err != nil {
		return nil, err
	}
	return &c, nil
}

// Page is the data of a list reply (C-16).
type Page[V any] struct {
	Items      []V    `json:"items"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// NewPage builds a page from rows fetched with limit+1, newest first: it
// keeps at most limit items, converted by view, and sets NextCursor after the
// last one kept when a further row exists. position returns a row's
// (created_at, id).
func NewPage[T any, V any](rows []T, limit int, binding string, position func(T) (time.Time, string), view func(T) V) Page[V] {
	page := Page[V]{Items: make([]V, 0, min(len(rows), limit))}
	for i, row := range rows {
		if i == limit {
			at, id := position(rows[limit-1])
			page.NextCursor = EncodeCursor(binding, Cursor{CreatedAt: at, ID: id})
			break
		}
		page.Items = append(page.Items, view(row))
	}
	return page
}

// PageSQL completes the query of a list page (C-16) and its arguments: when
// after is set, the condition that keeps the rows after that position, then
// the order "created_at DESC, id DESC" that cursors follow and a LIMIT of
// limit+1, so that NewPage can tell whether another page exists. query must
// end in a WHERE clause; alias qualifies the two columns ("" or such as
// "s.").
func PageSQL(query string, args []any, alias string, after *Cursor, limit int) (string, []any) {
	if after != nil {
		query += ` AND (` + alias + `created_at < ? OR (` + alias + `created_at = ? AND ` + alias + `id < ?))`
		args = append(args, after.CreatedAt, after.CreatedAt, after.ID)
	}
	query += ` ORDER BY ` + alias + `created_at DESC, ` + alias + `id DESC LIMIT ?`
	return query, append(args, limit+1)
}

// ListPage is the page a list asks for: at most Limit rows, after the
// position of After (nil: from the newest).
type ListPage struct {
	Limit int
	After *Cursor
}

// ListRows runs the query of one list page (C-16): base, ending in a WHERE
// clause, with its args; narrowed to state when state is set; then paged by
// PageSQL with alias. It returns up to page.Limit+1 rows converted by scan,
// so that NewPage can tell whether another page exists. Errors are returned
// as they are, for the caller to say where they come from.
func ListRows[T any](ctx context.Context, q db.Querier, scan func(db.Scanner) (T, error), base string, args []any, alias, state string, page ListPage) ([]T, error) {
	if state != "" {
		base += ` AND ` + alias + `state = ?`
		args = append(args, state)
	}
	query, args := PageSQL(base, args, alias, page.After, page.Limit)
	return db.QueryAll(ctx, q, scan, query, args...)
}
