package tasks_test

import (
	"net/http"
	"testing"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/modules/admin"
)

// TestC1_ASubmissionSeesACredentialChangeAtOnce: POST /v1/tasks may answer
// its caller from the node's recent authentications, and checks the grant
// again before writing, so a credential revoked, or one that lost its
// permission or its queue grant, is refused at its next submission, with
// the code a fresh authentication gives, and nothing is written.
func TestC1_ASubmissionSeesACredentialChangeAtOnce(t *testing.T) {
	t.Parallel()
	e := startServer(t)
	for _, change := range e.srv.GrantChanges(auth.PermTasksSubmit) {
		t.Run(change.Name, func(t *testing.T) {
			c := e.cred(t, "recheck-"+change.Name)
			e.submit(t, c, submitBody(c.QueueID, `{"n":1}`))
			change.Apply(t, c.CredentialID)
			r := e.post(t, c, "/v1/tasks", newKey(), submitBody(c.QueueID, `{"n":2}`))
			wantError(t, r, map[string]int{"UNAUTHENTICATED": http.StatusUnauthorized,
				"PERMISSION_DENIED": http.StatusForbidden, "NOT_FOUND": http.StatusNotFound}[change.Code], change.Code)
			count := e.taskCount(t, c.QueueID)
			if count != 1 {
				t.Errorf("%d tasks in the queue, want the first submission's alone", count)
			}
		})
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
