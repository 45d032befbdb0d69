package tasks_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/testkit/doctest"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/modules/admin"
	"github.com/orbitrun/orbit/modules/tasks"
)

type page struct {
	Items      []tasks.TaskView `json:"items"`
	NextCursor string           `json:"next_cursor"`
}

func decodePage(t *testing.T, r *servertest.Response) page {
	t.Helper()
	wantStatus(t, r, http.StatusOK)
	var p page
	if err := json.Unmarshal(r.Data, &p); err != nil {
		t.Fatalf("page: %v: %s", err, r.Body)
	}
	return p
}

func ids(views []tasks.TaskView) []string {
	out := make([]string, len(views))
	for i, v := range views {
		out[i] = v.ID
	}
	return out
}

// newestFirst sorts tasks by created_at DESC, id DESC (C-16).
func newestFirst(t *testing.T, views []tasks.TaskView) []tasks.TaskView {
	t.Helper()
	at := func(v tasks.TaskView) time.Time {
		ts, err := time.Parse(time.RFC3339Nano, v.CreatedAt)
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	out := slices.Clone(views)
	slices.SortFunc(out, func(a, b tasks.TaskView) int {
		if c := at(b).Compare(at(a)); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	return out
}

// walk follows next_cursor from path and returns every page.
func (e *env) walk(t *testing.T, c servertest.Credential, path string) []page {
	t.Helper()
	var pages []page
	cursor := ""
	for {
		p := path
		if cursor != "" {
			p += "&cursor=" + url.QueryEscape(cursor)
		}
		pg := decodePage(t, e.get(t, c, p))
		pages = append(pages, pg)
		if pg.NextCursor == "" {
			return pages
		}
		if len(pages) > 10 {
			t.Fatal("the list does not end")
		}
		cursor = pg.NextCursor
	}
}

func TestC16_ListPagination(t *testing.T) {
	t.Parallel()
	e := startServer(t)
	c := e.cred(t, "list")
	var created []tasks.TaskView
	for i := range 5 {
		created = append(created, e.submit(t, c, submitBody(c.QueueID, fmt.Sprintf(`{"n":%d}`, i))))
	}
	want := ids(newestFirst(t, created))
	list := "/v1/tasks?queue_id=" + c.QueueID

	t.Run("NewestFirst", func(t *testing.T) {
		p := decodePage(t, e.get(t, c, list))
		if got := ids(p.Items); !slices.Equal(got, want) || p.NextCursor != "" {
			t.Fatalf("list = %v (next_cursor %q), want %v and no cursor", got, p.NextCursor, want)
		}
	})

	t.Run("Pages", func(t *testing.T) {
		first := e.get(t, c, list+"&limit=2")
		cursor := decodePage(t, first).NextCursor
		if cursor == "" {
			t.Fatal("the first of three pages has no next_cursor")
		}
		// The cursor is opaque and changes with every run; the document
		// shows a placeholder of the same length.
		placeholder := "AQ" + strings.Repeat("A", len(cursor)-2)
		doctest.Check(t, docPath, "tasks-list-response", bytes.Replace(first.Body, []byte(cursor), []byte(placeholder), 1))
		pages := e.walk(t, c, list+"&limit=2")
		var got []tasks.TaskView
		var sizes []int
		for _, p := range pages {
			got = append(got, p.Items...)
			sizes = append(sizes, len(p.Items))
		}
		if !slices.Equal(ids(got), want) || !slices.Equal(sizes, []int{2, 2, 1}) {
			t.Fatalf("pages %v hold %v, want pages of 2, 2, 1 holding %v", sizes, ids(got), want)
		}
	})

	t.Run("LastFullPageHasNoCursor", func(t *testing.T) {
		if p := decodePage(t, e.get(t, c, list+"&limit=5")); len(p.Items) != 5 || p.NextCursor != "" {
			t.Fatalf("limit=5 over 5 tasks: %d items, next_cursor %q; want 5 and none", len(p.Items), p.NextCursor)
		}
	})

	for _, i := range []int{1, 3} {
		wantStatus(t, e.cancel(t, c, created[i].ID, `{}`), http.StatusOK)
	}
	var cancelled, pending []tasks.TaskView
	for i, v := range created {
		if i == 1 || i == 3 {
			cancelled = append(cancelled, v)
		} else {
			pending = append(pending, v)
		}
	}

	t.Run("StateFilter", func(t *testing.T) {
		var got []string
		for _, p := range e.walk(t, c, list+"&state=CANCELLED&limit=1") {
			got = append(got, ids(p.Items)...)
			for _, v := range p.Items {
				if v.State != tasks.StateCancelled {
					t.Errorf("state=CANCELLED listed a %s task", v.State)
				}
			}
		}
		if w := ids(newestFirst(t, cancelled)); !slices.Equal(got, w) {
			t.Fatalf("state=CANCELLED = %v, want %v", got, w)
		}
		if got, w := ids(decodePage(t, e.get(t, c, list+"&state=PENDING")).Items), ids(newestFirst(t, pending)); !slices.Equal(got, w) {
			t.Fatalf("state=PENDING = %v, want %v", got, w)
		}
		if p := decodePage(t, e.get(t, c, list+"&state=RUNNING")); len(p.Items) != 0 {
			t.Fatalf("state=RUNNING listed %v", ids(p.Items))
		}
	})

	t.Run("CursorIsBoundToTheState", func(t *testing.T) {
		byState := decodePage(t, e.get(t, c, list+"&state=CANCELLED&limit=1")).NextCursor
		unfiltered := decodePage(t, e.get(t, c, list+"&limit=1")).NextCursor
		for _, path := range []string{
			list + "&state=PENDING&limit=1&cursor=" + byState,
			list + "&limit=1&cursor=" + byState,
			list + "&state=CANCELLED&limit=1&cursor=" + unfiltered,
		} {
			wantError(t, e.get(t, c, path), http.StatusBadRequest, "INVALID_ARGUMENT")
		}
		// The limit does not shape the list: a cursor outlives a change of it.
		wantStatus(t, e.get(t, c, list+"&state=CANCELLED&limit=50&cursor="+byState), http.StatusOK)
	})

	t.Run("CursorIsBoundToTheQueue", func(t *testing.T) {
		other := e.cred(t, "list-other")
		otherTask := e.submit(t, other, submitBody(other.QueueID, `{}`))
		if err := admin.NewStore(e.srv.DB).CredentialGrantQueues(t.Context(), c.CredentialID, []string{other.QueueID}); err != nil {
			t.Fatal(err)
		}
		cursor := decodePage(t, e.get(t, c, list+"&limit=1")).NextCursor
		wantError(t, e.get(t, c, "/v1/tasks?queue_id="+other.QueueID+"&limit=1&cursor="+cursor), http.StatusBadRequest, "INVALID_ARGUMENT")
		if got := ids(decodePage(t, e.get(t, c, "/v1/tasks?queue_id="+other.QueueID)).Items); !slices.Equal(got, []string{otherTask.ID}) {
			t.Fatalf("the other queue lists %v, want only %s", got, otherTask.ID)
		}
		if got := ids(decodePage(t, e.get(t, c, list)).Items); slices.Contains(got, otherTask.ID) {
			t.Fatalf("a task of another queue is listed in this one")
		}
	})

	t.Run("CursorWithATimeOutsideYears1To9999IsInvalid", func(t *testing.T) {
		cursor := decodePage(t, e.get(t, c, list+"&limit=1")).NextCursor
		for _, seconds := range []int64{253402300800, -62135596801} {
			edited := servertest.CursorWithTime(t, cursor, seconds)
			wantError(t, e.get(t, c, list+"&limit=1&cursor="+edited), http.StatusBadRequest, "INVALID_ARGUMENT")
		}
	})

	t.Run("CursorIsBoundToTheCredential", func(t *testing.T) {
		cursor := decodePage(t, e.get(t, c, list+"&limit=1")).NextCursor
		wantError(t, e.get(t, e.cred(t, "list"), list+"&limit=1&cursor="+cursor), http.StatusBadRequest, "INVALID_ARGUMENT")
	})
}
