package tasks

import (
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/idem"
)

func pendingWithKey(credentialID, key string) *pendingSubmit {
	return &pendingSubmit{item: idem.ScopedItem{CredentialID: credentialID, Operation: "POST /v1/tasks",
		Item: idem.Item{Key: key, Body: []byte(`{}`)}}}
}

func keysOf(round []*pendingSubmit) []string {
	var keys []string
	for _, r := range round {
		keys = append(keys, r.item.CredentialID+"/"+r.item.Key)
	}
	return keys
}

// TestC14_SubmitRoundsNeverRecordOneKeyAtOnce: two rounds of submits on a
// node never hold one idempotency key at once (C-14: concurrent requests
// with one key, exactly one performs the change, and the other gets its
// receipt). A round leaves a key another round holds, and a repeat of its
// own, to a later round; when every key it has is held, it waits for the
// round holding them.
func TestC14_SubmitRoundsNeverRecordOneKeyAtOnce(t *testing.T) {
	k := newSubmitKeys()
	first, rest := k.take([]*pendingSubmit{pendingWithKey("c1", "a"), pendingWithKey("c1", "b"), pendingWithKey("c1", "a")})
	if got := keysOf(first); len(got) != 2 || got[0] != "c1/a" || got[1] != "c1/b" || len(rest) != 1 {
		t.Fatalf("first round %v, %d left; want c1/a, c1/b and the repeat of a left", got, len(rest))
	}

	// Another credential's key "a" is another key.
	second, rest := k.take([]*pendingSubmit{pendingWithKey("c1", "a"), pendingWithKey("c2", "a"), pendingWithKey("c1", "c")})
	if got := keysOf(second); len(got) != 2 || got[0] != "c2/a" || got[1] != "c1/c" || len(rest) != 1 {
		t.Fatalf("second round %v, %d left; want c2/a, c1/c and c1/a left", got, len(rest))
	}

	took := make(chan []*pendingSubmit)
	go func() {
		round, _ := k.take([]*pendingSubmit{pendingWithKey("c1", "b")})
		took <- round
	}()
	select {
	case round := <-took:
		t.Fatalf("took %v while the first round holds it", keysOf(round))
	case <-time.After(50 * time.Millisecond):
	}
	k.release(second)
	select {
	case round := <-took:
		t.Fatalf("took %v when another round's keys were released", keysOf(round))
	case <-time.After(50 * time.Millisecond):
	}
	k.release(first)
	select {
	case round := <-took:
		if got := keysOf(round); len(got) != 1 || got[0] != "c1/b" {
			t.Fatalf("third round %v, want c1/b", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the round waiting for c1/b did not take it after it was released")
	}
	if len(k.held) != 1 {
		t.Fatalf("%d keys held, want 1 (the third round's)", len(k.held))
	}
}
