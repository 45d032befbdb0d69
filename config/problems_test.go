package config

import (
	"strings"
	"testing"
	"time"
)

func TestProblemsNameTheirKeysAndAreAllReported(t *testing.T) {
	t.Parallel()
	p := NewProblems("events")
	p.Positive("lease_duration", 0)
	p.Positive("poll_interval", time.Second)
	p.AtLeastOne("read_queue", 0)
	p.AtLeastOne("write_queue", 8)
	p.Add("heartbeat_interval", "must be shorter than idle_timeout")
	err := p.Err()
	if err == nil {
		t.Fatal("no error for three problems")
	}
	for _, want := range []string{
		"events.lease_duration: must be positive, got 0s",
		"events.read_queue: must be at least 1, got 0",
		"events.heartbeat_interval: must be shorter than idle_timeout",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "poll_interval") || strings.Contains(err.Error(), "write_queue") {
		t.Errorf("error %q names a valid key", err)
	}
	if err := NewProblems("").Err(); err != nil {
		t.Errorf("empty problems: %v", err)
	}
}
