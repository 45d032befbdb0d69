package wake

import "testing"

func TestNotifyWakesEveryWaiter(t *testing.T) {
	t.Parallel()
	var b Broadcast
	a, c := b.C(), b.C()
	b.Notify()
	<-a
	<-c
	select {
	case <-b.C():
		t.Fatal("a new channel must wait for the next Notify")
	default:
	}
}

func TestNotifyWithoutWaitersDoesNotBlock(t *testing.T) {
	t.Parallel()
	var b Broadcast
	b.Notify()
	b.Notify()
}

func TestNotifyCountsAndWakeDoesNot(t *testing.T) {
	t.Parallel()
	var b Broadcast
	if g := b.Gen(); g != 0 {
		t.Fatalf("gen of a new broadcast: %d", g)
	}
	ch := b.C()
	b.Wake()
	<-ch
	if g := b.Gen(); g != 0 {
		t.Fatalf("gen after Wake: %d, want 0", g)
	}
	ch = b.C()
	b.Notify()
	b.Notify()
	<-ch
	if g := b.Gen(); g != 2 {
		t.Fatalf("gen after two Notify: %d, want 2", g)
	}
}

func TestKeyedWakesTheWaitersOfItsKeysAlone(t *testing.T) {
	var k Keyed
	a, b := k.C("a"), k.C("b")
	k.Notify("a", "nobody")
	select {
	case <-a:
	default:
		t.Fatal("a's waiter was not woken")
	}
	select {
	case <-b:
		t.Fatal("b's waiter was woken by a change to a")
	default:
	}
	k.Drop("b")
	select {
	case <-b:
	default:
		t.Fatal("dropping b did not wake its waiter")
	}
	if len(k.byKey) != 1 {
		t.Fatalf("%d keys kept, want a alone", len(k.byKey))
	}
}
