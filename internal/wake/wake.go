// Package wake lets one goroutine tell many others that something changed,
// without polling and without blocking the sender.
package wake

import "sync"

// Broadcast wakes every waiter at once. The zero value is ready to use.
type Broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

// C returns a channel that is closed at the next Notify. Take the channel
// before checking the condition, then wait on it, so no notification is lost.
func (b *Broadcast) C() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// Notify wakes everyone waiting on a channel from C. It never blocks.
func (b *Broadcast) Notify() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}
