package subscriptions

import (
	"sync"
	"time"
)

// activityMinutes is how many whole minutes of delivery activity a node
// keeps per subscription, for the console's chart.
const activityMinutes = 30

// ActivityMinute is what one node did for one subscription in one minute:
// deliveries it leased to its event connections and first ACKs it
// recorded.
type ActivityMinute struct {
	Start     time.Time
	Delivered int64
	Acked     int64
}

// activity counts, per subscription and minute, what this node delivered
// and recorded as acknowledged over the last activityMinutes minutes. It
// lives in memory only: each node counts its own connections, from its
// start. A nil *activity counts nothing.
type activity struct {
	mu   sync.Mutex
	subs map[string]*activityRing
	// pruned is the minute of the last removal of idle subscriptions.
	pruned int64
}

// activityRing holds one subscription's minutes, indexed by minute number
// modulo activityMinutes.
type activityRing struct {
	minute    [activityMinutes]int64
	delivered [activityMinutes]int64
	acked     [activityMinutes]int64
	last      int64
}

func newActivity() *activity { return &activity{subs: map[string]*activityRing{}} }

// add counts delivered and acked for a subscription at now.
func (a *activity) add(subscriptionID string, now time.Time, delivered, acked int) {
	if a == nil || delivered+acked <= 0 || subscriptionID == "" {
		return
	}
	min := now.Unix() / 60
	a.mu.Lock()
	defer a.mu.Unlock()
	if min != a.pruned {
		// Once a minute, forget subscriptions idle for the whole window,
		// so the map holds only active ones.
		a.pruned = min
		for id, r := range a.subs {
			if min-r.last >= activityMinutes {
				delete(a.subs, id)
			}
		}
	}
	r := a.subs[subscriptionID]
	if r == nil {
		r = &activityRing{}
		a.subs[subscriptionID] = r
	}
	i := min % activityMinutes
	if r.minute[i] != min {
		r.minute[i], r.delivered[i], r.acked[i] = min, 0, 0
	}
	r.delivered[i] += int64(delivered)
	r.acked[i] += int64(acked)
	r.last = min
}

// minutes returns the last activityMinutes minutes of a subscription up to
// now, oldest first, zeros included.
func (a *activity) minutes(subscriptionID string, now time.Time) []ActivityMinute {
	cur := now.Unix() / 60
	out := make([]ActivityMinute, activityMinutes)
	for k := range out {
		out[k].Start = time.Unix((cur-activityMinutes+1+int64(k))*60, 0).UTC()
	}
	if a == nil {
		return out
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.subs[subscriptionID]
	if r == nil {
		return out
	}
	for k := range out {
		min := cur - activityMinutes + 1 + int64(k)
		if i := min % activityMinutes; r.minute[i] == min {
			out[k].Delivered, out[k].Acked = r.delivered[i], r.acked[i]
		}
	}
	return out
}
