package inbox

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// Parse's consistency rules, without a database.

const (
	testQueue   = "0123456789abcdef0123456789abcdef"
	testTask    = "fedcba9876543210fedcba9876543210"
	testEventID = "aaaabbbbccccddddeeeeffff00001111"
)

// resultEvent returns a task.succeeded event as the platform sends it,
// after change (if any) edited its decoded form.
func resultEvent(t *testing.T, change func(ev map[string]any)) []byte {
	t.Helper()
	raw := []byte(`{"id":"` + testEventID + `","sequence":"7","type":"task.succeeded","aggregate_kind":"task",` +
		`"aggregate_id":"` + testTask + `","aggregate_revision":"3","occurred_at":"2026-09-17T10:00:00.123456Z",` +
		`"details":{"state":"SUCCEEDED","reason":"COMPLETED"},` +
		`"snapshot":{"schema_version":1,"task_id":"` + testTask + `","queue_id":"` + testQueue + `","state":"SUCCEEDED",` +
		`"revision":"3","effect_uncertain":false,"result":{"amount":12345678901234567890123,"rate":1.50},` +
		`"current_attempt_id":"99998888777766665555444433332222"}}`)
	if change == nil {
		return raw
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var ev map[string]any
	if err := dec.Decode(&ev); err != nil {
		t.Fatal(err)
	}
	change(ev)
	out, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func snap(ev map[string]any) map[string]any { return ev["snapshot"].(map[string]any) }

func TestR11_ParseAcceptsAResultEvent(t *testing.T) {
	t.Parallel()
	raw := resultEvent(t, nil)
	ev, canonical, digest, err := Parse(raw, testQueue)
	if err != nil {
		t.Fatal(err)
	}
	if ev.ID != testEventID || ev.AggregateID != testTask || ev.Snapshot.State != "SUCCEEDED" || ev.Snapshot.Revision != "3" {
		t.Fatalf("parsed %+v", ev)
	}
	if got := string(ev.Snapshot.Result); got != `{"amount":12345678901234567890123,"rate":1.50}` {
		t.Fatalf("result = %s, want its exact decimal text", got)
	}
	want, err := Canonicalize(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(canonical, want) {
		t.Fatalf("canonical form = %s, want %s", canonical, want)
	}
	sum := sha256.Sum256(canonical)
	if digest != hex.EncodeToString(sum[:]) {
		t.Fatalf("digest = %s, want the SHA-256 of the canonical form", digest)
	}
}

func TestR11_ParseEachResultTypeNeedsItsState(t *testing.T) {
	t.Parallel()
	types := map[string]string{
		"task.succeeded":    "SUCCEEDED",
		"task.failed":       "FAILED",
		"task.cancelled":    "CANCELLED",
		"task.needs_review": "NEEDS_REVIEW",
	}
	for typ, state := range types {
		for _, snapState := range []string{"SUCCEEDED", "FAILED", "CANCELLED", "NEEDS_REVIEW", "PENDING", "RUNNING", "", "succeeded"} {
			raw := resultEvent(t, func(ev map[string]any) {
				ev["type"] = typ
				snap(ev)["state"] = snapState
			})
			_, _, _, err := Parse(raw, testQueue)
			if snapState == state {
				if err != nil {
					t.Errorf("%s with state %s: %v", typ, snapState, err)
				}
			} else if !errors.Is(err, ErrInvalidEvent) {
				t.Errorf("%s with state %q: %v, want ErrInvalidEvent", typ, snapState, err)
			}
		}
	}
}

func TestR11_ParseRefusesInconsistentEvents(t *testing.T) {
	t.Parallel()
	const other = "00000000000000000000000000000001"
	for name, change := range map[string]func(ev map[string]any){
		"RequeuedIsNotAResult":   func(ev map[string]any) { ev["type"] = "task.requeued"; snap(ev)["state"] = "PENDING" },
		"NoType":                 func(ev map[string]any) { delete(ev, "type") },
		"AggregateKindNotTask":   func(ev map[string]any) { ev["aggregate_kind"] = "queue" },
		"AggregateIsAnotherTask": func(ev map[string]any) { ev["aggregate_id"] = other },
		"SnapshotOfAnotherTask":  func(ev map[string]any) { snap(ev)["task_id"] = other },
		"UppercaseEventID":       func(ev map[string]any) { ev["id"] = strings.ToUpper(testEventID) },
		"ShortEventID":           func(ev map[string]any) { ev["id"] = testEventID[:31] },
		"ShortTaskIDs":           func(ev map[string]any) { ev["aggregate_id"] = testTask[:31]; snap(ev)["task_id"] = testTask[:31] },
		"SchemaVersion2":         func(ev map[string]any) { snap(ev)["schema_version"] = 2 },
		"NoSchemaVersion":        func(ev map[string]any) { delete(snap(ev), "schema_version") },
		"RevisionsDisagree":      func(ev map[string]any) { ev["aggregate_revision"] = "4" },
		"RevisionZero":           func(ev map[string]any) { ev["aggregate_revision"] = "0"; snap(ev)["revision"] = "0" },
		"RevisionLeadingZero":    func(ev map[string]any) { ev["aggregate_revision"] = "03"; snap(ev)["revision"] = "03" },
		"RevisionNegative":       func(ev map[string]any) { ev["aggregate_revision"] = "-3"; snap(ev)["revision"] = "-3" },
		"RevisionEmpty":          func(ev map[string]any) { ev["aggregate_revision"] = ""; snap(ev)["revision"] = "" },
		"RevisionFraction":       func(ev map[string]any) { ev["aggregate_revision"] = "3.0"; snap(ev)["revision"] = "3.0" },
		"RevisionOverflows": func(ev map[string]any) {
			ev["aggregate_revision"] = "18446744073709551616"
			snap(ev)["revision"] = "18446744073709551616"
		},
		"RevisionAsNumber": func(ev map[string]any) {
			ev["aggregate_revision"] = json.Number("3")
			snap(ev)["revision"] = json.Number("3")
		},
		"SnapshotNotAnObject":     func(ev map[string]any) { ev["snapshot"] = "{}" },
		"OccurredAtNotATime":      func(ev map[string]any) { ev["occurred_at"] = "2026-09-17 10:00:00" },
		"EffectUncertainNotABool": func(ev map[string]any) { snap(ev)["effect_uncertain"] = "no" },
		"SchemaVersionNotANumber": func(ev map[string]any) { snap(ev)["schema_version"] = "1" },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if _, _, _, err := Parse(resultEvent(t, change), testQueue); !errors.Is(err, ErrInvalidEvent) {
				t.Fatalf("err = %v, want ErrInvalidEvent", err)
			}
		})
	}
}

func TestR11_ParseRefusesAnotherQueue(t *testing.T) {
	t.Parallel()
	raw := resultEvent(t, nil)
	_, _, _, err := Parse(raw, "00000000000000000000000000000002")
	if !errors.Is(err, ErrWrongQueue) || errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("err = %v, want ErrWrongQueue", err)
	}
	noQueue := resultEvent(t, func(ev map[string]any) { delete(snap(ev), "queue_id") })
	if _, _, _, err := Parse(noQueue, testQueue); !errors.Is(err, ErrWrongQueue) {
		t.Fatalf("event without a queue: %v, want ErrWrongQueue", err)
	}
}

// Size, JSON validity, duplicate keys and Unicode are checked before the
// fields: such an event is invalid whatever queue it names.
func TestR11_ParseChecksTheTextFirst(t *testing.T) {
	t.Parallel()
	raw := resultEvent(t, nil)
	for name, bad := range map[string][]byte{
		"Oversized":    append(raw[:len(raw)-1:len(raw)-1], []byte(`,"pad":"`+strings.Repeat("x", MaxEventBytes)+`"}`)...),
		"InvalidJSON":  raw[:len(raw)-1],
		"DuplicateKey": append([]byte(`{"id":"`+testEventID+`",`), raw[1:]...),
		"InvalidUTF8":  bytes.Replace(raw, []byte(`"COMPLETED"`), []byte("\"COMPLETED\xc3\""), 1),
	} {
		if _, _, _, err := Parse(bad, "00000000000000000000000000000002"); !errors.Is(err, ErrInvalidEvent) {
			t.Errorf("%s from another queue: %v, want ErrInvalidEvent", name, err)
		}
	}
}

func TestR11_ParseSizeLimitIsMaxEventBytes(t *testing.T) {
	t.Parallel()
	base := resultEvent(t, func(ev map[string]any) { ev["pad"] = "" })
	fill := MaxEventBytes - len(base)
	exact := bytes.Replace(base, []byte(`"pad":""`), []byte(`"pad":"`+strings.Repeat("x", fill)+`"`), 1)
	if len(exact) != MaxEventBytes {
		t.Fatalf("built %d bytes, want %d", len(exact), MaxEventBytes)
	}
	if _, _, _, err := Parse(exact, testQueue); err != nil {
		t.Fatalf("event of exactly %d bytes: %v", MaxEventBytes, err)
	}
	over := bytes.Replace(exact, []byte(`"pad":"`), []byte(`"pad":"x`), 1)
	if _, _, _, err := Parse(over, testQueue); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("event of %d bytes: %v, want ErrInvalidEvent", len(over), err)
	}
}

// The digest ignores key order, whitespace and the zone of occurred_at,
// and changes with any content.
func TestR11_ParseDigestIsOfTheContent(t *testing.T) {
	t.Parallel()
	_, canonical, digest, err := Parse(resultEvent(t, nil), testQueue)
	if err != nil {
		t.Fatal(err)
	}
	reformatted := resultEvent(t, func(ev map[string]any) { ev["occurred_at"] = "2026-09-17T12:00:00.123456+02:00" })
	var indented bytes.Buffer
	if err := json.Indent(&indented, reformatted, "", "  "); err != nil {
		t.Fatal(err)
	}
	_, canonical2, digest2, err := Parse(indented.Bytes(), testQueue)
	if err != nil {
		t.Fatal(err)
	}
	if digest2 != digest || !bytes.Equal(canonical2, canonical) {
		t.Fatalf("reformatted event has another canonical form:\n%s\n%s", canonical2, canonical)
	}
	for name, change := range map[string]func(ev map[string]any){
		"Reason":         func(ev map[string]any) { ev["details"].(map[string]any)["reason"] = "REVIEW_RESOLVED" },
		"ResultDecimals": func(ev map[string]any) { snap(ev)["result"].(map[string]any)["rate"] = json.Number("1.5") },
		"OccurredAt":     func(ev map[string]any) { ev["occurred_at"] = "2026-09-17T10:00:00.123457Z" },
		"Sequence":       func(ev map[string]any) { ev["sequence"] = "8" },
	} {
		_, _, d, err := Parse(resultEvent(t, change), testQueue)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d == digest {
			t.Errorf("%s: a changed event has the same digest", name)
		}
	}
}
