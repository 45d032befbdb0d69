package tasks_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/modules/admin"
)

// TestC1_ASubmissionSeesACredentialChangeAtOnce: POST /v1/tasks may answer
// its caller from the node's recent authentications, and checks the grant
// again before writing, so a credential revoked, or one that lost its
// permission or its queue grant, is refused at its next submission, with
// the code a fresh authentication gives, and nothing is written. A request
// that is wrong in another way too gets the answer it would get without the
// cache: a revoked credential 401 and one without the permission 403 for a
// malformed body or a missing key as well.
func TestC1_ASubmissionSeesACredentialChangeAtOnce(t *testing.T) {
	t.Parallel()
	e := startServer(t)
	status := map[string]int{"UNAUTHENTICATED": http.StatusUnauthorized, "PERMISSION_DENIED": http.StatusForbidden,
		"NOT_FOUND": http.StatusNotFound, "INVALID_ARGUMENT": http.StatusBadRequest}
	for _, change := range e.srv.GrantChanges(auth.PermTasksSubmit) {
		malformed := change.Code
		if change.Code == "NOT_FOUND" {
			malformed = "INVALID_ARGUMENT" // the body is read before the queue is looked at
		}
		for _, tt := range []struct {
			name, key, body, code string
		}{
			{"Valid", newKey(), submitBody("%s", `{"n":2}`), change.Code},
			{"MalformedBody", newKey(), `{"queue_id":`, malformed},
			{"NoKey", "", submitBody("%s", `{"n":2}`), change.Code},
		} {
			t.Run(change.Name+"/"+tt.name, func(t *testing.T) {
				// The first submission leaves the principal cached.
				c := e.cred(t, "recheck-"+change.Name+"-"+tt.name)
				e.submit(t, c, submitBody(c.QueueID, `{"n":1}`))
				change.Apply(t, c.CredentialID)
				r := e.post(t, c, "/v1/tasks", tt.key, strings.Replace(tt.body, "%s", c.QueueID, 1))
				if r.Status != status[tt.code] || r.Code() != tt.code {
					t.Errorf("got %d %q, want %d %s: %s", r.Status, r.Code(), status[tt.code], tt.code, r.Body)
				}
				if count := e.taskCount(t, c.QueueID); count != 1 {
					t.Errorf("%d tasks in the queue, want the first submission's alone", count)
				}
			})
		}
	}
}

// TestC1_ASubmissionSeesANewQueueGrantAtOnce: a queue granted after the
// node cached its caller's authentication is usable at once.
func TestC1_ASubmissionSeesANewQueueGrantAtOnce(t *testing.T) {
	t.Parallel()
	e := startServer(t)
	c := e.cred(t, "granted-first")
	later := e.cred(t, "granted-later")
	e.submit(t, c, submitBody(c.QueueID, `{"n":1}`))
	if err := admin.NewStore(e.srv.DB).CredentialGrantQueues(t.Context(), c.CredentialID, []string{later.QueueID}); err != nil {
		t.Fatal(err)
	}
	if task := e.submit(t, c, submitBody(later.QueueID, `{"n":2}`)); task.QueueID != later.QueueID {
		t.Errorf("task in queue %s, want %s", task.QueueID, later.QueueID)
	}
}
