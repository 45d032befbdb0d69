//go:build chaos

package chaos_test

import (
	"strings"
	"sync"
)

// tally counts what the client processes printed, across every process
// of each kind, killed ones included.
type tally struct {
	mu            sync.Mutex
	workerStarts  map[string]int             // task → handler calls
	inflight      map[string]map[string]bool // worker name → tasks started, not done
	consumerGot   map[string]int             // event → calls of the SDK consumer's handler
	receiverCalls map[string]int             // event → calls of the receiver's handler
	outcomes      map[string]int             // receiver outcome → lines
	unconfirmed   []string                   // events whose Inbox COMMIT was unconfirmed, in order
}

func newTally() *tally {
	return &tally{
		workerStarts: map[string]int{}, inflight: map[string]map[string]bool{},
		consumerGot: map[string]int{}, receiverCalls: map[string]int{}, outcomes: map[string]int{},
	}
}

// worker returns the line handler of the worker process called name.
func (ty *tally) worker(name string) func(string) {
	ty.mu.Lock()
	ty.inflight[name] = map[string]bool{}
	ty.mu.Unlock()
	return func(line string) {
		verb, id, ok := strings.Cut(line, " ")
		if !ok {
			return
		}
		ty.mu.Lock()
		defer ty.mu.Unlock()
		switch verb {
		case "start":
			ty.workerStarts[id]++
			ty.inflight[name][id] = true
		case "done":
			delete(ty.inflight[name], id)
		}
	}
}

// takeInflight returns and forgets the tasks a worker process started and
// did not finish.
func (ty *tally) takeInflight(name string) []string {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	var out []string
	for id := range ty.inflight[name] {
		out = append(out, id)
	}
	ty.inflight[name] = map[string]bool{}
	return out
}

// inflightCount returns how many tasks a worker process is working on, as
// far as its output has been read.
func (ty *tally) inflightCount(name string) int {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	return len(ty.inflight[name])
}

func (ty *tally) consumer(line string) {
	if id, ok := strings.CutPrefix(line, "got "); ok {
		ty.mu.Lock()
		ty.consumerGot[id]++
		ty.mu.Unlock()
	}
}

// receiver counts the classification lines of `receiver consume`:
// "event=<id> type=<type> outcome=<outcome>".
func (ty *tally) receiver(line string) {
	var event, outcome string
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, "event="); ok {
			event = v
		} else if v, ok := strings.CutPrefix(f, "outcome="); ok {
			outcome = v
		}
	}
	if event == "" || outcome == "" {
		return
	}
	ty.mu.Lock()
	defer ty.mu.Unlock()
	ty.receiverCalls[event]++
	ty.outcomes[outcome]++
	if outcome == "commit_unconfirmed" {
		ty.unconfirmed = append(ty.unconfirmed, event)
	}
}

// unconfirmedSince returns the events whose commit was unconfirmed after
// the first n.
func (ty *tally) unconfirmedSince(n int) []string {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	return append([]string(nil), ty.unconfirmed[n:]...)
}

func (ty *tally) unconfirmedCount() int {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	return len(ty.unconfirmed)
}
