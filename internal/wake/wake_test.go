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
