package admin

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
)

// Queue is a queue as GET /v1/queues shows it.
type Queue struct {
	ID          string
	Name        string
	NamespaceID string
	Namespace   string
	CreatedAt   time.Time
}

// queueView is the wire form of a Queue.
type queueView struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	NamespaceID string `json:"namespace_id"`
	Namespace   string `json:"namespace"`
	CreatedAt   string `json:"created_at"`
}

func (q *Queue) view() queueView {
	return queueView{ID: q.ID, Name: q.Name, NamespaceID: q.NamespaceID, Namespace: q.Namespace, CreatedAt: httpx.FormatTime(q.CreatedAt)}
}

// queueListParams page the queues a credential is granted.
type queueListParams struct {
	CredentialID string
	NamespaceID  string
	// Name, when set, keeps only the queue of that name.
	Name string
	httpx.ListPage
}

func scanQueue(row db.Scanner) (*Queue, error) {
	var q Queue
	if err := row.Scan(&q.ID, &q.Name, &q.NamespaceID, &q.Namespace, &q.CreatedAt); err != nil {
		return nil, err
	}
	return &q, nil
}

// queueList returns up to p.Limit+1 queues of the credential's namespace
// that the credential is granted, newest first. The grant is read from
// credential_queue_grants in the same statement, so a grant removed a
// moment ago is not listed.
func queueList(ctx context.Context, q db.Querier, p *queueListParams) ([]*Queue, error) {
	base := `SELECT q.id, q.name, q.namespace_id, n.name, q.created_at
		FROM credential_queue_grants g
		JOIN queues q ON q.id = g.queue_id
		JOIN namespaces n ON n.id = q.namespace_id
		WHERE g.credential_id = ? AND q.namespace_id = ?`
	args := []any{p.CredentialID, p.NamespaceID}
	if p.Name != "" {
		base += ` AND q.name = ?`
		args = append(args, p.Name)
	}
	out, err := httpx.ListRows(ctx, q, scanQueue, base, args, "q.", "", p.ListPage)
	if err != nil {
		return nil, fmt.Errorf("admin: list queues: %w", err)
	}
	return out, nil
}

// listQueues serves GET /v1/queues: the queues the caller's credential is
// granted, newest first (C-16), optionally only the one named name. Any
// valid credential may call it, as GET /v1/credential: it shows only what
// the credential may already act on.
func (m *Module) listQueues(w http.ResponseWriter, r *http.Request) {
	httpx.Read(w, r, []string{"name", "limit", "cursor"}, func(q map[string]string) (page httpx.Page[queueView], err error) {
		name, named := q["name"]
		if named && !httpx.ValidName(name, maxNameLen) {
			return page, httpx.Errorf(httpx.CodeInvalidArgument, "query parameter \"name\" must be 1 to 128 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit")
		}
		limit, err := httpx.Limit(q)
		if err != nil {
			return page, err
		}
		p := auth.FromContext(r.Context())
		binding := "queues|" + p.CredentialID + "|" + p.NamespaceID + "|name=" + name
		after, err := httpx.CursorParam(q, binding)
		if err != nil {
			return page, err
		}
		rows, err := queueList(r.Context(), m.store.db, &queueListParams{
			CredentialID: p.CredentialID, NamespaceID: p.NamespaceID, Name: name,
			ListPage: httpx.ListPage{Limit: limit, After: after},
		})
		if err != nil {
			return page, err
		}
		return httpx.NewPage(rows, limit, binding,
			func(q *Queue) (time.Time, string) { return q.CreatedAt, q.ID },
			func(q *Queue) queueView { return q.view() }), nil
	})
}
