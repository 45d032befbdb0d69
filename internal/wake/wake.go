// Package wake lets one goroutine tell many others that something changed,
// without polling and without blocking the sender.
package wake

import "sync"

// Broadcast wakes every waiter at once. The zero value is ready to use.
//
// It counts its own notifications (Gen), so that a publisher can tell a
// change made on this node (Notify) from a wake-up relayed from another
// node (Wake), which it must not publish again.
type Broadcast struct {
	mu  sync.Mutex
	ch  chan struct{}
	gen uint64
}

// C returns a channel that is closed at the next Notify or Wake. Take the
// channel before checking the condition, then wait on it, so no
// notification is lost.
func (b *Broadcast) C() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// Notify records a change made on this node (Gen counts it) and wakes
// everyone waiting on a channel from C. It never blocks.
func (b *Broadcast) Notify() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gen++
	b.wakeLocked()
}

// Wake wakes everyone waiting on a channel from C without counting a
// change: for a change made elsewhere, such as on another node. It never
// blocks.
func (b *Broadcast) Wake() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.wakeLocked()
}

// Gen returns how many times Notify was called. Take the channel from C
// before reading it, then wait on the channel, so no Notify is missed.
func (b *Broadcast) Gen() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.gen
}

func (b *Broadcast) wakeLocked() {
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}

// Keyed holds a Broadcast per key (a queue, a subscription), made when a
// waiter first asks for the key, so that a change to one key wakes its
// waiters alone. The zero value is ready to use.
type Keyed struct {
	mu    sync.Mutex
	byKey map[string]*Broadcast
}

// C returns a channel that is closed at the key's next Notify (or Drop).
// Take it before checking the condition, as with Broadcast.C.
func (k *Keyed) C(key string) <-chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	b := k.byKey[key]
	if b == nil {
		if k.byKey == nil {
			k.byKey = map[string]*Broadcast{}
		}
		b = new(Broadcast)
		k.byKey[key] = b
	}
	return b.C()
}

// Notify wakes the waiters of each key. A key nobody asked for costs
// nothing. It never blocks.
func (k *Keyed) Notify(keys ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, key := range keys {
		if b := k.byKey[key]; b != nil {
			b.Notify()
		}
	}
}

// Drop wakes the key's waiters and forgets the key (one whose subject is
// gone); a later C makes it again.
func (k *Keyed) Drop(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if b := k.byKey[key]; b != nil {
		b.Notify()
		delete(k.byKey, key)
	}
}

// Scoped is a node's wake-up signal for changes that concern some keys (a
// queue, a subscription) or everything: Notify wakes this node's waiters
// of those keys alone (KeyC), NotifyAll every waiter (C). Relayed counts
// both for the other nodes, which learn only that something changed: it is
// what a module publishes, and All what a wake-up relayed from another
// node wakes (cluster.Signal's Broadcast and Woken). The zero value is
// ready to use.
type Scoped struct {
	All     Broadcast
	Relayed Broadcast
	keys    Keyed
}

// C returns a channel closed at the next NotifyAll or relayed wake-up.
func (s *Scoped) C() <-chan struct{} { return s.All.C() }

// KeyC returns a channel closed at the next Notify of key (or Drop).
func (s *Scoped) KeyC(key string) <-chan struct{} { return s.keys.C(key) }

// NotifyAll wakes every waiter, on this node and, relayed, on the others.
func (s *Scoped) NotifyAll() {
	s.All.Notify()
	s.Relayed.Notify()
}

// Notify wakes the waiters of these keys on this node, and every waiter
// on the others.
func (s *Scoped) Notify(keys ...string) {
	s.keys.Notify(keys...)
	s.Relayed.Notify()
}

// Drop wakes a key's waiters and forgets the key (see Keyed.Drop).
func (s *Scoped) Drop(key string) { s.keys.Drop(key) }
