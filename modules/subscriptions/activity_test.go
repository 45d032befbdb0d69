package subscriptions

import (
	"testing"
	"time"
)

// TestO9_ActivityCountsPerMinute: the chart's counts land in their
// minute, the window slides over 30 minutes, and an idle subscription is
// forgotten.
func TestO9_ActivityCountsPerMinute(t *testing.T) {
	t.Parallel()
	a := newActivity()
	t0 := time.Date(2026, 9, 17, 10, 0, 30, 0, time.UTC)
	a.add("s", t0, 3, 0)
	a.add("s", t0.Add(10*time.Second), 0, 2)
	a.add("s", t0.Add(2*time.Minute), 1, 1)
	got := a.minutes("s", t0.Add(2*time.Minute))
	if len(got) != activityMinutes {
		t.Fatalf("%d minutes, want %d", len(got), activityMinutes)
	}
	last, before := got[len(got)-1], got[len(got)-3]
	if last.Delivered != 1 || last.Acked != 1 || before.Delivered != 3 || before.Acked != 2 {
		t.Errorf("minutes: %+v and %+v, want 1/1 and 3/2", last, before)
	}
	if !last.Start.Equal(time.Date(2026, 9, 17, 10, 2, 0, 0, time.UTC)) {
		t.Errorf("last minute starts %s", last.Start)
	}
	// 40 minutes later the old counts are out of the window, and another
	// subscription's add forgets the idle one.
	later := t0.Add(42 * time.Minute)
	for _, m := range a.minutes("s", later) {
		if m.Delivered != 0 || m.Acked != 0 {
			t.Fatalf("a minute out of the window still counts: %+v", m)
		}
	}
	a.add("other", later, 1, 0)
	if _, ok := a.subs["s"]; ok {
		t.Error("an idle subscription is still kept")
	}
	var nilActivity *activity
	nilActivity.add("s", t0, 1, 1)
	if n := len(nilActivity.minutes("s", t0)); n != activityMinutes {
		t.Errorf("nil activity: %d minutes", n)
	}
}
