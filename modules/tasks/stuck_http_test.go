package tasks_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/testkit/doctest"
	"github.com/orbitrun/orbit/modules/tasks"
)

// TestK14_StuckTasks: GET /v1/tasks?state=RUNNING&older_than_ms=N lists the
// RUNNING tasks whose attempt began at least N ms ago, with the worker
// session holding each; other combinations are 400.
func TestK14_StuckTasks(t *testing.T) {
	t.Parallel()
	e := startServer(t)
	c := e.cred(t, "stuck")
	running := e.submit(t, c, submitBody(c.QueueID, `{"n":1}`))
	a := e.lease(t, c, running.ID, time.Minute)
	e.submit(t, c, submitBody(c.QueueID, `{"n":2}`)) // PENDING: never listed
	base := "/v1/tasks?queue_id=" + c.QueueID

	r := e.get(t, c, base+"&state=RUNNING&older_than_ms=0")
	wantStatus(t, r, http.StatusOK)
	doctest.Check(t, docPath, "tasks-list-stuck-response", r.Body)
	var p struct {
		Items []tasks.StuckTaskView `json:"items"`
	}
	if err := json.Unmarshal(r.Data, &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != 1 || p.Items[0].ID != running.ID || p.Items[0].LeaseSessionID != a.Session || p.Items[0].LeasedAt == "" {
		t.Fatalf("stuck tasks %s", r.Body)
	}
	if err := json.Unmarshal(e.get(t, c, base+"&state=RUNNING&older_than_ms=60000").Data, &p); err != nil || len(p.Items) != 0 {
		t.Errorf("an attempt of a moment ago is listed as older than a minute: %v %+v", err, p.Items)
	}
	for _, q := range []string{"&older_than_ms=0", "&state=PENDING&older_than_ms=0", "&state=RUNNING&older_than_ms=x",
		"&state=RUNNING&older_than_ms=", "&state=RUNNING&older_than_ms=1&older_than_ms=2"} {
		wantError(t, e.get(t, c, base+q), http.StatusBadRequest, "INVALID_ARGUMENT")
	}
	other := e.cred(t, "stuck-other")
	wantError(t, e.get(t, other, base+"&state=RUNNING&older_than_ms=0"), http.StatusNotFound, "NOT_FOUND")
}
