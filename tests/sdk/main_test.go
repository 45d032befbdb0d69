package sdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// waitTime bounds every wait for the server's background work.
const waitTime = 15 * time.Second

// allPermissions are what the tests' credentials hold: everything the
// management API and the tasks API need, but not tasks:work or review.
var allPermissions = []string{
	"events:manage", "events:read", "events:consume",
	"tasks:submit", "tasks:read", "tasks:cancel",
}

// fixture is a real server, one credential and an SDK client for it.
type fixture struct {
	srv     *servertest.Server
	cred    servertest.Credential
	client  *orbit.Client
	queueID string
}

// setup starts a server on a fresh database and returns a client whose
// credential holds allPermissions on queue "q" of namespace "ns".
func setup(t *testing.T) *fixture {
	t.Helper()
	srv := servertest.Start(t)
	cred := srv.Credential(t, servertest.CredentialParams{Permissions: allPermissions})
	return &fixture{srv: srv, cred: cred, client: newClient(t, srv, cred.Token), queueID: cred.QueueID}
}

// newClient returns an SDK client for srv with its own connections, closed
// when the test ends.
func newClient(t *testing.T, srv *servertest.Server, token string) *orbit.Client {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	c, err := orbit.NewClient(srv.URL, token, orbit.WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// apiCode returns the code of err's *orbit.APIError, failing the test when
// err is not one.
func apiCode(t *testing.T, err error) string {
	t.Helper()
	var apiErr *orbit.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %v; want an *orbit.APIError", err)
	}
	return apiErr.Code
}

// createSubscription creates a subscription on the fixture's queue.
func (f *fixture) createSubscription(t *testing.T, key string, req orbit.CreateSubscriptionRequest) orbit.Subscription {
	t.Helper()
	if req.QueueID == "" {
		req.QueueID = f.queueID
	}
	res, err := f.client.CreateSubscription(context.Background(), key, req)
	if err != nil {
		t.Fatalf("create %s: %v", req.Name, err)
	}
	return res.Subscription
}

// cancelledTask submits a task and cancels it while it is PENDING, which
// appends one task.cancelled result to the queue's log, and returns it.
func (f *fixture) cancelledTask(t *testing.T, name string) orbit.Task {
	t.Helper()
	ctx := context.Background()
	sub, err := f.client.SubmitTask(ctx, name+":submit", orbit.SubmitTaskRequest{
		QueueID: f.queueID, Input: json.RawMessage(`{"name":"` + name + `"}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.client.CancelTask(ctx, sub.Task.ID, name+":cancel", orbit.CancelTaskRequest{Reason: "not needed"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Task.State != orbit.TaskStateCancelled {
		t.Fatalf("cancelled task is %s", res.Task.State)
	}
	return res.Task
}

// waitDelivery polls the deliveries of a subscription until the
// background materialiser has made one for the event of task taskID, and
// returns it with its event. It fails the test after waitTime.
func (f *fixture) waitDelivery(t *testing.T, subscriptionID, taskID string) *orbit.DeliveryDetail {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(waitTime)
	seen := map[string]bool{}
	for {
		page, err := f.client.ListEventDeliveries(ctx, subscriptionID, orbit.ListEventDeliveriesRequest{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range page.Items {
			if seen[d.ID] {
				continue
			}
			seen[d.ID] = true
			detail, err := f.client.GetEventDelivery(ctx, subscriptionID, d.ID)
			if err != nil {
				t.Fatal(err)
			}
			if detail.Event.AggregateID == taskID {
				return detail
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no delivery for task %s after %s", taskID, waitTime)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
