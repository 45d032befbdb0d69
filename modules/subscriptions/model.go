package subscriptions

import (
	"sort"
	"strings"
	"time"

	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/modules/tasks"
)

// Delivery states.
const (
	statePending = "PENDING"
	stateLeased  = "LEASED"
	StateAcked   = "ACKED"
	stateExpired = "EXPIRED"
)

// Limits and defaults of seed 001 §2 and §4.
const (
	maxSubscriptionsPerNamespace = 64
	defaultMaxPending            = 100
	maxMaxPending                = 1000
	defaultMaxAttempts           = 20
	maxMaxAttempts               = 100
	maxAdditionalAttempts        = 100
	maxAttemptBudget             = 1_000_000
	maxReasonChars               = 1024
)

// Reasons a delivery is EXPIRED (K-6), and the last_error of a lease that
// ran out.
const (
	ExpiredAttemptsExhausted = "ATTEMPTS_EXHAUSTED"
	ExpiredRejected          = "REJECTED"
	ExpiredSkipped           = "SKIPPED"
	LastErrorLeaseExpired    = "LEASE_EXPIRED"
)

// checkExpiredReason refuses, naming the field at path, a value that is not
// one of the reasons a delivery is EXPIRED (K-6).
func checkExpiredReason(path, reason string) error {
	switch reason {
	case ExpiredAttemptsExhausted, ExpiredRejected, ExpiredSkipped:
		return nil
	}
	return httpx.Errorf(httpx.CodeInvalidArgument, "%s must be ATTEMPTS_EXHAUSTED, REJECTED or SKIPPED", path)
}

// Subscription is a subscription row plus its live backlog.
type Subscription struct {
	ID             string
	NamespaceID    string
	QueueID        string
	CredentialID   string
	Name           string
	Revision       uint64
	Enabled        bool
	Types          []string
	CursorSequence uint64
	// PendingCount is the number of PENDING, LEASED and EXPIRED deliveries.
	PendingCount int
	MaxPending   int
	MaxAttempts  int
	// RetryPolicy sets available_at after a NACK without delay and after
	// a lease expiry (K-4).
	RetryPolicy RetryPolicy
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// subscriptionView is the wire form, field for field the seed's.
type subscriptionView struct {
	ID             string       `json:"id"`
	QueueID        string       `json:"queue_id"`
	CredentialID   string       `json:"credential_id"`
	Name           string       `json:"name"`
	Revision       httpx.Uint64 `json:"revision"`
	Enabled        bool         `json:"enabled"`
	Types          []string     `json:"types"`
	CursorSequence httpx.Uint64 `json:"cursor_sequence"`
	PendingCount   int          `json:"pending_count"`
	MaxPending     int          `json:"max_pending"`
	MaxAttempts    int          `json:"max_attempts"`
	RetryPolicy    RetryPolicy  `json:"retry_policy"`
	CreatedAt      string       `json:"created_at"`
	UpdatedAt      string       `json:"updated_at"`
	// What the subscription shows of its progress (K-10, K-12).
	BlockedReason      *string      `json:"blocked_reason"`
	Lag                httpx.Uint64 `json:"lag"`
	OldestPendingAgeMS int64        `json:"oldest_pending_age_ms"`
	DeadLetters        int          `json:"dead_letters"`
	RedeliveryHorizon  httpx.Uint64 `json:"redelivery_horizon"`
}

// view returns the wire form of s with its progress st.
func (s *Subscription) view(st Stats) subscriptionView {
	v := subscriptionView{
		ID: s.ID, QueueID: s.QueueID, CredentialID: s.CredentialID, Name: s.Name,
		Revision: httpx.Uint64(s.Revision), Enabled: s.Enabled, Types: s.Types,
		CursorSequence: httpx.Uint64(s.CursorSequence), PendingCount: s.PendingCount,
		MaxPending: s.MaxPending, MaxAttempts: s.MaxAttempts, RetryPolicy: s.RetryPolicy,
		CreatedAt: httpx.FormatTime(s.CreatedAt), UpdatedAt: httpx.FormatTime(s.UpdatedAt),
		Lag: httpx.Uint64(st.Lag), OldestPendingAgeMS: st.OldestPendingAge.Milliseconds(),
		DeadLetters: st.DeadLetters, RedeliveryHorizon: httpx.Uint64(st.RedeliveryHorizon),
	}
	if st.BlockedReason != "" {
		reason := st.BlockedReason
		v.BlockedReason = &reason
	}
	return v
}

// wants reports whether the subscription receives events of type typ.
// wantsEveryResult reports whether the subscription takes every result
// type, so that every result it scans takes a backlog slot.
func (s *Subscription) wantsEveryResult() bool {
	return len(s.Types) == len(tasks.ResultTypes)
}

func (s *Subscription) wants(typ string) bool {
	for _, t := range s.Types {
		if t == typ {
			return true
		}
	}
	return false
}

// normalizeTypes checks a requested type set (S-4, S-5, S-7): empty means
// all four result types; otherwise a non-repeating subset, returned sorted.
func normalizeTypes(in []string) ([]string, error) {
	if len(in) == 0 {
		return append([]string(nil), tasks.ResultTypes...), nil
	}
	seen := map[string]bool{}
	for _, t := range in {
		valid := false
		for _, r := range tasks.ResultTypes {
			valid = valid || t == r
		}
		if !valid {
			return nil, httpx.Errorf(httpx.CodeInvalidArgument, "types: %q is not a result type (task.succeeded, task.failed, task.cancelled, task.needs_review)", t)
		}
		if seen[t] {
			return nil, httpx.Errorf(httpx.CodeInvalidArgument, "types: %q is repeated", t)
		}
		seen[t] = true
	}
	out := append([]string(nil), in...)
	sort.Strings(out)
	return out, nil
}

func joinTypes(types []string) string { return strings.Join(types, ",") }

func splitTypes(s string) []string {
	if s == "" {
		return []string{}
	}
	return strings.Split(s, ",")
}

// Delivery is an event delivery row.
type Delivery struct {
	ID             string
	SubscriptionID string
	QueueID        string
	EventID        string
	Sequence       uint64
	Revision       uint64
	State          string
	CreatedAt      time.Time
	AvailableAt    time.Time
	LeaseEpoch     uint64
	LeaseUntil     *time.Time
	LeaseDigest    []byte
	LeaseSession   string
	Attempts       int
	AttemptBudget  int
	AcknowledgedAt *time.Time
	// ExpiredReason says why an EXPIRED delivery is there; "" otherwise.
	ExpiredReason string
	// LastError is the last NACK or reject reason, or LEASE_EXPIRED; ""
	// when there was none.
	LastError string
	// Nacks counts the NACKs received; never reset.
	Nacks int
}

// DeliveryView is the wire form of an EventDelivery (seed 001 §4). It never
// holds the lease secret or its digest.
type DeliveryView struct {
	CreatedAt      string       `json:"created_at"`
	ID             string       `json:"id"`
	SubscriptionID string       `json:"subscription_id"`
	EventID        string       `json:"event_id"`
	Sequence       httpx.Uint64 `json:"sequence"`
	Revision       httpx.Uint64 `json:"revision"`
	State          string       `json:"state"`
	AvailableAt    string       `json:"available_at"`
	LeaseEpoch     httpx.Uint64 `json:"lease_epoch"`
	LeaseUntil     string       `json:"lease_until,omitempty"`
	Attempts       int          `json:"attempts"`
	AttemptBudget  int          `json:"attempt_budget"`
	AcknowledgedAt string       `json:"acknowledged_at,omitempty"`
	ExpiredReason  string       `json:"expired_reason,omitempty"`
	LastError      string       `json:"last_error,omitempty"`
	Nacks          int          `json:"nacks,omitzero"`
}

// View returns the wire form of d. lease_until appears only while LEASED,
// acknowledged_at only when ACKED, expired_reason only when EXPIRED,
// last_error only once there was one and nacks only once there was one, so
// that a consumer that never NACKs sees the seed's delivery.
func (d *Delivery) View() DeliveryView {
	v := DeliveryView{
		CreatedAt: httpx.FormatTime(d.CreatedAt), ID: d.ID, SubscriptionID: d.SubscriptionID,
		EventID: d.EventID, Sequence: httpx.Uint64(d.Sequence), Revision: httpx.Uint64(d.Revision),
		State: d.State, AvailableAt: httpx.FormatTime(d.AvailableAt), LeaseEpoch: httpx.Uint64(d.LeaseEpoch),
		Attempts: d.Attempts, AttemptBudget: d.AttemptBudget, LastError: d.LastError, Nacks: d.Nacks,
	}
	if d.State == stateExpired {
		v.ExpiredReason = d.ExpiredReason
	}
	if d.State == stateLeased && d.LeaseUntil != nil {
		v.LeaseUntil = httpx.FormatTime(*d.LeaseUntil)
	}
	if d.State == StateAcked && d.AcknowledgedAt != nil {
		v.AcknowledgedAt = httpx.FormatTime(*d.AcknowledgedAt)
	}
	return v
}
