package receiver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	orbit "github.com/orbitrun/orbit/sdk/go"

	"github.com/orbitrun/orbit/examples/result-inbox/inbox"
)

// The consume handler and its output, without a database: every
// event here is refused by inbox.Parse before any SQL runs.

const (
	storeQueue  = "0123456789abcdef0123456789abcdef"
	otherQueue  = "abcdefabcdefabcdefabcdefabcdef01"
	testTask    = "fedcba9876543210fedcba9876543210"
	testEventID = "aaaabbbbccccddddeeeeffff00001111"
	leaseSecret = "lease-secret-never-printed"
	resultBody  = "result-body-never-printed"
)

// succeededOn returns a task.succeeded event of queue with a result body.
func succeededOn(queue string) []byte {
	return []byte(`{"id":"` + testEventID + `","sequence":"7","type":"task.succeeded","aggregate_kind":"task",` +
		`"aggregate_id":"` + testTask + `","aggregate_revision":"3","occurred_at":"2026-09-17T10:00:00.123456Z",` +
		`"details":{"state":"SUCCEEDED"},"snapshot":{"schema_version":1,"task_id":"` + testTask + `","queue_id":"` + queue + `",` +
		`"state":"SUCCEEDED","revision":"3","effect_uncertain":false,"result":{"note":"` + resultBody + `"}}}`)
}

// delivery wraps raw as the SDK hands a delivery to a handler.
func delivery(raw []byte) *orbit.Delivery {
	return &orbit.Delivery{
		EventDelivery: orbit.EventDelivery{ID: "11112222333344445555666677778888", SubscriptionID: "99990000999900009999000099990000", EventID: testEventID, State: orbit.DeliveryStateLeased},
		Event:         orbit.ResultEvent{ID: testEventID, Type: orbit.EventTypeTaskSucceeded, AggregateID: testTask},
		EventJSON:     raw,
		Proof:         orbit.AckProof{DeliveryID: "11112222333344445555666677778888", Epoch: 1, LeaseSecret: leaseSecret},
	}
}

func TestR7_ClassifyIsStable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		res  inbox.Result
		err  error
		want Outcome
	}{
		{inbox.Result{Applied: true}, nil, OutcomeApplied},
		{inbox.Result{Duplicate: true, Applied: true}, nil, OutcomeDuplicate},
		{inbox.Result{Duplicate: true}, nil, OutcomeDuplicate},
		{inbox.Result{}, nil, OutcomeStale},
		{inbox.Result{}, fmt.Errorf("%w: other content", inbox.ErrConflict), OutcomeConflict},
		{inbox.Result{}, inbox.ErrWrongQueue, OutcomeWrongQueue},
		{inbox.Result{}, fmt.Errorf("%w: bad", inbox.ErrInvalidEvent), OutcomeInvalidEvent},
		{inbox.Result{}, fmt.Errorf("%w: EOF", inbox.ErrCommitUnconfirmed), OutcomeCommitUnconfirmed},
		{inbox.Result{}, errors.New("inbox: begin: connection refused"), OutcomeStorageError},
		{inbox.Result{}, context.Canceled, OutcomeStorageError},
	} {
		if got := Classify(tc.res, tc.err); got != tc.want {
			t.Errorf("Classify(%+v, %v) = %s, want %s", tc.res, tc.err, got, tc.want)
		}
	}
}

// a refused event prints one classification line with the event
// id and type and nothing of the proof or the result, and the handler
// returns an error, so the SDK does not acknowledge.
func TestR7_HandlerPrintsOnlyTheClassification(t *testing.T) {
	t.Parallel()
	store, err := inbox.NewStore(nil, DefaultReceiverName, storeQueue) // never reached: Parse refuses first
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		raw  []byte
		want Outcome
	}{
		{"AnotherQueue", succeededOn(otherQueue), OutcomeWrongQueue},
		{"InvalidJSON", []byte(`{"id":"` + testEventID + `","snapshot":{"result":"` + resultBody + `"`), OutcomeInvalidEvent},
		{"DuplicateKeys", []byte(`{"id":"x","id":"y","note":"` + resultBody + `"}`), OutcomeInvalidEvent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			handle := applyHandler(store, &printer{out: &out})
			err := handle(t.Context(), delivery(tc.raw))
			if err == nil {
				t.Fatal("the handler returned nil for a refused event: it would be acknowledged")
			}
			want := fmt.Sprintf("event=%s type=task.succeeded outcome=%s\n", testEventID, tc.want)
			if out.String() != want {
				t.Errorf("handler printed %q, want %q", out.String(), want)
			}
			for _, secret := range []string{leaseSecret, resultBody} {
				if strings.Contains(out.String()+err.Error(), secret) {
					t.Errorf("output or error holds %q", secret)
				}
			}
		})
	}
}

// EventJSON hands Apply the event exactly as the server sent it; only
// without the raw text does it encode the decoded event.
func TestR16_EventJSONIsTheTextAsReceived(t *testing.T) {
	t.Parallel()
	raw := []byte(`{"id":"` + testEventID + `", "snapshot":{"result":{"n":12345678901234567890123}}}`)
	got, err := EventJSON(delivery(raw))
	if err != nil || !bytes.Equal(got, raw) {
		t.Fatalf("EventJSON = %s, %v; want the raw text", got, err)
	}
	d := delivery(nil)
	got, err = EventJSON(d)
	if err != nil || !strings.Contains(string(got), `"id":"`+testEventID+`"`) {
		t.Fatalf("EventJSON without raw text = %s, %v", got, err)
	}
}
