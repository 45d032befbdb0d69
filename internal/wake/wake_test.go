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
