package console

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/orbitrun/orbit/modules/subscriptions"
)

// The API's objects as the pages read them: decoded from the data of the
// API's replies, only the fields the pages show.

type queue struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	CreatedAt string `json:"created_at"`
}

type page[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor"`
}

type taskError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type task struct {
	ID               string          `json:"id"`
	QueueID          string          `json:"queue_id"`
	State            string          `json:"state"`
	Revision         string          `json:"revision"`
	Idempotent       bool            `json:"idempotent"`
	MaxAttempts      int             `json:"max_attempts"`
	Attempts         int             `json:"attempts"`
	EffectUncertain  bool            `json:"effect_uncertain"`
	CancelRequested  bool            `json:"cancel_requested"`
	CurrentAttemptID string          `json:"current_attempt_id"`
	Input            json.RawMessage `json:"input"`
	Result           json.RawMessage `json:"result"`
	Error            *taskError      `json:"error"`
	CreatedAt        string          `json:"created_at"`
	UpdatedAt        string          `json:"updated_at"`
	FinishedAt       string          `json:"finished_at"`
}

// Final reports whether the task can no longer be cancelled.
func (t task) Final() bool {
	switch t.State {
	case "SUCCEEDED", "FAILED", "CANCELLED", "NEEDS_REVIEW":
		return true
	}
	return false
}

type subscription struct {
	ID                 string   `json:"id"`
	QueueID            string   `json:"queue_id"`
	Name               string   `json:"name"`
	Revision           string   `json:"revision"`
	Enabled            bool     `json:"enabled"`
	Types              []string `json:"types"`
	CursorSequence     string   `json:"cursor_sequence"`
	PendingCount       int      `json:"pending_count"`
	MaxPending         int      `json:"max_pending"`
	MaxAttempts        int      `json:"max_attempts"`
	CreatedAt          string   `json:"created_at"`
	UpdatedAt          string   `json:"updated_at"`
	BlockedReason      *string  `json:"blocked_reason"`
	Lag                string   `json:"lag"`
	OldestPendingAgeMS int64    `json:"oldest_pending_age_ms"`
	DeadLetters        int      `json:"dead_letters"`
	RedeliveryHorizon  string   `json:"redelivery_horizon"`
}

// Blocked returns blocked_reason, or "" when the subscription moves.
func (s subscription) Blocked() string {
	if s.BlockedReason == nil {
		return ""
	}
	return *s.BlockedReason
}

// live is what the subscription page refreshes without a reload.
func (s subscription) live() map[string]string {
	state := "active"
	if !s.Enabled {
		state = "paused"
	}
	blocked := s.Blocked()
	if blocked == "" {
		blocked = "none"
	}
	return map[string]string{
		"state": state, "blocked_reason": blocked, "lag": s.Lag,
		"pending_count": fmt.Sprint(s.PendingCount), "dead_letters": fmt.Sprint(s.DeadLetters),
		"oldest_pending_age": age(time.Duration(s.OldestPendingAgeMS) * time.Millisecond),
		"cursor_sequence":    s.CursorSequence, "revision": s.Revision,
	}
}

type delivery struct {
	ID             string `json:"id"`
	SubscriptionID string `json:"subscription_id"`
	EventID        string `json:"event_id"`
	Sequence       string `json:"sequence"`
	Revision       string `json:"revision"`
	State          string `json:"state"`
	CreatedAt      string `json:"created_at"`
	AvailableAt    string `json:"available_at"`
	LeaseEpoch     string `json:"lease_epoch"`
	LeaseUntil     string `json:"lease_until"`
	Attempts       int    `json:"attempts"`
	AttemptBudget  int    `json:"attempt_budget"`
	AcknowledgedAt string `json:"acknowledged_at"`
	ExpiredReason  string `json:"expired_reason"`
	LastError      string `json:"last_error"`
	Nacks          int    `json:"nacks"`
}

type event struct {
	ID                string          `json:"id"`
	Sequence          string          `json:"sequence"`
	Type              string          `json:"type"`
	AggregateID       string          `json:"aggregate_id"`
	AggregateRevision string          `json:"aggregate_revision"`
	OccurredAt        string          `json:"occurred_at"`
	Details           json.RawMessage `json:"details"`
	Snapshot          json.RawMessage `json:"snapshot"`
}

// guardedCount is the answer of a dry run (K-7, K-8).
type guardedCount struct {
	Matched int      `json:"matched"`
	Sample  []string `json:"sample"`
}

// age formats a duration for people: "0s", "42s", "3m 5s", "2h 10m".
func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	default:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	}
}

// pretty indents raw JSON for a <pre>; invalid or empty input is shown as
// it is.
func pretty(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return string(raw)
	}
	return string(b)
}

// chart is the inline SVG chart of a subscription's activity: two
// polylines over the last minutes, with its numbers for screen readers.
type chart struct {
	Width, Height      int
	Delivered, Acked   string
	Max                int64
	TotalDelivered     int64
	TotalAcked         int64
	Minutes            []subscriptions.ActivityMinute
	FirstLabel, Latest string
}

const (
	chartWidth  = 360
	chartHeight = 90
)

func newChart(minutes []subscriptions.ActivityMinute) chart {
	c := chart{Width: chartWidth, Height: chartHeight, Minutes: minutes, Max: 1}
	for _, mn := range minutes {
		c.Max = max(c.Max, mn.Delivered, mn.Acked)
		c.TotalDelivered += mn.Delivered
		c.TotalAcked += mn.Acked
	}
	var d, a strings.Builder
	step := float64(chartWidth) / float64(max(1, len(minutes)-1))
	for i, mn := range minutes {
		x := float64(i) * step
		yd := float64(chartHeight) - float64(mn.Delivered)/float64(c.Max)*float64(chartHeight-4) - 2
		ya := float64(chartHeight) - float64(mn.Acked)/float64(c.Max)*float64(chartHeight-4) - 2
		fmt.Fprintf(&d, "%.1f,%.1f ", x, yd)
		fmt.Fprintf(&a, "%.1f,%.1f ", x, ya)
	}
	c.Delivered, c.Acked = strings.TrimSpace(d.String()), strings.TrimSpace(a.String())
	if len(minutes) > 0 {
		c.FirstLabel = minutes[0].Start.Format("15:04")
		c.Latest = minutes[len(minutes)-1].Start.Format("15:04")
	}
	return c
}
