package orbit

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Result event types a subscription can receive. task.requeued, which a
// safe retry writes to the result log, is not among them.
const (
	EventTypeTaskSucceeded = "task.succeeded"
	EventTypeTaskFailed    = "task.failed"
	EventTypeTaskCancelled = "task.cancelled"
	// EventTypeTaskNeedsReview is neither success nor a definite failure:
	// the same task may later produce another final result, so receivers
	// deduplicate by event ID, never by task ID.
	EventTypeTaskNeedsReview = "task.needs_review"
)

// Event delivery states.
const (
	// DeliveryStatePending waits to be leased to an event connection.
	DeliveryStatePending = "PENDING"
	// DeliveryStateLeased is held by an event connection until its lease
	// runs out.
	DeliveryStateLeased = "LEASED"
	// DeliveryStateAcked was acknowledged; it no longer counts as pending.
	DeliveryStateAcked = "ACKED"
	// DeliveryStateExpired used its whole attempt budget; only
	// RetryEventDelivery makes it PENDING again.
	DeliveryStateExpired = "EXPIRED"
)

// Subscription is a result subscription as the server reports it. It is
// bound for good to the credential that created it and to one queue.
type Subscription struct {
	ID           string `json:"id"`
	QueueID      string `json:"queue_id"`
	CredentialID string `json:"credential_id"`
	Name         string `json:"name"`
	// Revision is the configuration version: it changes with every
	// ConfigureSubscription, never with deliveries or acknowledgements.
	Revision uint64 `json:"revision,string"`
	Enabled  bool   `json:"enabled"`
	// Types are the subscribed event types, in the server's fixed order.
	Types []string `json:"types"`
	// CursorSequence is how far the queue's result log has been scanned
	// into delivery records; it is not an acknowledgement mark.
	CursorSequence uint64 `json:"cursor_sequence,string"`
	// PendingCount counts the PENDING, LEASED and EXPIRED deliveries.
	PendingCount int       `json:"pending_count"`
	MaxPending   int       `json:"max_pending"`
	MaxAttempts  int       `json:"max_attempts"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
	// RetryPolicy sets when a delivery comes back after a NACK without a
	// delay or a lease that ran out (K-4); nil from a server that does not
	// report it.
	RetryPolicy *RetryPolicy `json:"retry_policy,omitempty"`
	// BlockedReason says why the subscription does not move (K-10): empty,
	// or one of the Blocked constants.
	BlockedReason string `json:"blocked_reason,omitempty"`
	// Lag is what is still to be delivered: the queue's head − cursor +
	// PENDING + LEASED deliveries.
	Lag uint64 `json:"lag,string,omitempty"`
	// OldestPendingAgeMS is the age of the oldest PENDING or LEASED
	// delivery in milliseconds, 0 without one.
	OldestPendingAgeMS int64 `json:"oldest_pending_age_ms,omitempty"`
	// DeadLetters counts the EXPIRED deliveries.
	DeadLetters int `json:"dead_letters,omitempty"`
	// RedeliveryHorizon is the lowest sequence that can ever be delivered
	// to the subscription again: the queue's retention mark (K-12).
	// Nothing below it can be retried or replayed, so a receiver may
	// forget the events below it. nil from a server that does not report
	// it.
	RedeliveryHorizon *uint64 `json:"redelivery_horizon,string,omitempty"`
}

// Reasons a subscription does not move (Subscription.BlockedReason), in
// the order the server checks them.
const (
	BlockedPaused         = "PAUSED"
	BlockedHistoryExpired = "HISTORY_EXPIRED"
	BlockedBacklogFull    = "BACKLOG_FULL"
	BlockedNoConsumer     = "NO_CONSUMER"
	BlockedRetryWait      = "RETRY_WAIT"
)

// RetryPolicy is a subscription's retry policy (K-4): after a NACK without
// a delay, or a lease that ran out, a delivery waits a random time up to
// min(MaxDelayMS, InitialDelayMS × Multiplier^(attempts−1)).
type RetryPolicy struct {
	// InitialDelayMS is 0 to 86,400,000 and at most MaxDelayMS; the
	// server's default is 1,000.
	InitialDelayMS int64 `json:"initial_delay_ms"`
	// MaxDelayMS is 0 to 86,400,000; the default is 600,000.
	MaxDelayMS int64 `json:"max_delay_ms"`
	// Multiplier is 1.0 to 10.0; the default is 2.0.
	Multiplier float64 `json:"multiplier"`
}

// SubscriptionResult is the receipt of a subscription write. Deduplicated
// is set when the idempotency key had been used before with the same
// request: Subscription is then the subscription as it was after the
// original write, not its current state (use GetSubscription for that).
type SubscriptionResult struct {
	Subscription Subscription `json:"subscription"`
	Deduplicated bool         `json:"deduplicated"`
}

// CreateSubscriptionRequest is the body of CreateSubscription. Zero fields
// are left out of the request, so the server applies its defaults.
type CreateSubscriptionRequest struct {
	// Name is required: 1 to 128 ASCII letters, digits, '.', '_' or '-',
	// starting with a letter or digit, unique in the namespace.
	Name string `json:"name,omitempty"`
	// QueueID is required and names the queue whose results are delivered;
	// it cannot be changed later.
	QueueID string `json:"queue_id,omitempty"`
	// Types is a non-repeating subset of the EventType constants; empty
	// means all four.
	Types []string `json:"types,omitempty"`
	// FromSequence is where delivery starts: with the first event after
	// this sequence of the queue's result log. nil starts after the head
	// committed at creation; a pointer to 0 starts with the oldest
	// retained event. A caller retrying an unanswered create must send the
	// same value, not a newer one.
	FromSequence *uint64 `json:"from_sequence,omitempty,string"`
	// MaxPending bounds the deliveries not yet acknowledged, 1 to 1000; 0
	// means the server's default (100).
	MaxPending int `json:"max_pending,omitempty"`
	// MaxAttempts is the attempt budget of each delivery, 1 to 100; 0 means
	// the server's default (20).
	MaxAttempts int `json:"max_attempts,omitempty"`
	// RetryPolicy, when set, replaces the server's default retry policy.
	RetryPolicy *RetryPolicy `json:"retry_policy,omitempty"`
}

// CreateSubscription creates a subscription (POST /v1/subscriptions,
// permission events:manage) owned by the client's credential. key is the
// Idempotency-Key: a caller persists it, with the request, before the
// call, and repeats both unchanged until it gets an answer; a repeat
// returns the original receipt with Deduplicated set. A namespace holds at
// most 64 subscriptions (SUBSCRIPTION_LIMIT) and none is ever deleted.
func (c *Client) CreateSubscription(ctx context.Context, key string, req CreateSubscriptionRequest) (*SubscriptionResult, error) {
	if err := checkKey("CreateSubscription", key); err != nil {
		return nil, err
	}
	var res SubscriptionResult
	if err := c.do(ctx, http.MethodPost, "/v1/subscriptions", nil, key, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// ListSubscriptionsRequest selects a page of ListSubscriptions.
type ListSubscriptionsRequest struct {
	// QueueID names the queue; it is required.
	QueueID string
	// Limit is the page size, 1 to 100; 0 means the server's default (20).
	Limit int
	// Cursor is the NextCursor of the previous page, or empty for the
	// first page. It is valid only with the same QueueID.
	Cursor string
}

// SubscriptionPage is one page of ListSubscriptions. NextCursor is empty
// on the last page.
type SubscriptionPage struct {
	Items      []Subscription `json:"items"`
	NextCursor string         `json:"next_cursor,omitempty"`
}

// ListSubscriptions returns the client credential's own subscriptions on a
// queue, newest first (GET /v1/subscriptions, permission events:read).
func (c *Client) ListSubscriptions(ctx context.Context, req ListSubscriptionsRequest) (*SubscriptionPage, error) {
	q := url.Values{}
	if req.QueueID != "" {
		q.Set("queue_id", req.QueueID)
	}
	if req.Limit > 0 {
		q.Set("limit", strconv.Itoa(req.Limit))
	}
	if req.Cursor != "" {
		q.Set("cursor", req.Cursor)
	}
	var page SubscriptionPage
	if err := c.do(ctx, http.MethodGet, "/v1/subscriptions", q, "", nil, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// GetSubscription returns the current configuration and backlog of a
// subscription (GET /v1/subscriptions/{id}, permission events:read). A
// subscription of another credential, even in the same namespace, is
// NOT_FOUND.
func (c *Client) GetSubscription(ctx context.Context, id string) (*Subscription, error) {
	if err := checkIDs("GetSubscription", "subscription id", id); err != nil {
		return nil, err
	}
	var s Subscription
	if err := c.do(ctx, http.MethodGet, subscriptionPath(id), nil, "", nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// ConfigureSubscriptionRequest is the body of ConfigureSubscription.
// ExpectedRevision, Enabled and Reason are always sent.
type ConfigureSubscriptionRequest struct {
	// ExpectedRevision must equal the subscription's current Revision, as
	// GetSubscription reports it; otherwise the call is STATE_CONFLICT.
	ExpectedRevision uint64 `json:"expected_revision,string"`
	// Enabled resumes (true) or pauses (false) the subscription.
	Enabled bool `json:"enabled"`
	// Reason, 1 to 1024 characters, is recorded in the audit log.
	Reason string `json:"reason"`
	// RetryPolicy, when set, replaces the retry policy; nil keeps it.
	RetryPolicy *RetryPolicy `json:"retry_policy,omitempty"`
}

// ConfigureSubscription pauses or resumes a subscription
// (POST /v1/subscriptions/{id}:configure, permission events:manage). Every
// call with a new key is a new audited change that increases the revision,
// even when Enabled does not change. A paused subscription materialises
// and leases nothing new; what was delivered stays delivered and may still
// be acknowledged. key is the Idempotency-Key: a repeat with the same key
// must carry the original ExpectedRevision and returns the original
// receipt.
func (c *Client) ConfigureSubscription(ctx context.Context, id, key string, req ConfigureSubscriptionRequest) (*SubscriptionResult, error) {
	if err := checkIDs("ConfigureSubscription", "subscription id", id); err != nil {
		return nil, err
	}
	if err := checkKey("ConfigureSubscription", key); err != nil {
		return nil, err
	}
	var res SubscriptionResult
	if err := c.do(ctx, http.MethodPost, subscriptionPath(id)+":configure", nil, key, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// EventDelivery is the delivery of one result event to one subscription.
// Its ID does not change across redeliveries of the event.
type EventDelivery struct {
	ID             string `json:"id"`
	SubscriptionID string `json:"subscription_id"`
	EventID        string `json:"event_id"`
	// Sequence is the event's position in the queue's result log.
	Sequence uint64 `json:"sequence,string"`
	// Revision changes with every lease, recovery, acknowledgement and
	// retry; RetryEventDelivery expects it.
	Revision uint64 `json:"revision,string"`
	// State is one of the DeliveryState constants.
	State       string    `json:"state"`
	CreatedAt   time.Time `json:"created_at"`
	AvailableAt time.Time `json:"available_at"`
	// LeaseEpoch is 0 until the first lease and grows by one with each.
	LeaseEpoch uint64 `json:"lease_epoch,string"`
	// LeaseUntil is set only while LEASED.
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
	// Attempts counts the leases so far; a retry does not reset it.
	Attempts int `json:"attempts"`
	// AttemptBudget is the cumulative number of attempts allowed.
	AttemptBudget int `json:"attempt_budget"`
	// AcknowledgedAt is set only when ACKED: the first valid
	// acknowledgement.
	AcknowledgedAt *time.Time `json:"acknowledged_at,omitempty"`
	// ExpiredReason is set only when EXPIRED: ExpiredAttemptsExhausted,
	// ExpiredRejected or ExpiredSkipped.
	ExpiredReason string `json:"expired_reason,omitempty"`
	// LastError is the reason of the last NACK or reject, or
	// LEASE_EXPIRED after a lease ran out; empty when there was none.
	LastError string `json:"last_error,omitempty"`
	// Nacks counts the NACKs the delivery received.
	Nacks int `json:"nacks,omitempty"`
}

// ResultEvent is an entry of a queue's result log. Details and Snapshot
// keep their JSON text exactly, so numbers in a task result are not
// rounded through float64; DecodeSnapshot reads the task snapshot.
type ResultEvent struct {
	// ID identifies the event; receivers use it as their Inbox key.
	ID       string `json:"id"`
	Sequence uint64 `json:"sequence,string"`
	// Type is one of the EventType constants.
	Type string `json:"type"`
	// AggregateKind is "task"; AggregateID is the task's ID and
	// AggregateRevision its revision after the result.
	AggregateKind     string    `json:"aggregate_kind"`
	AggregateID       string    `json:"aggregate_id"`
	AggregateRevision uint64    `json:"aggregate_revision,string"`
	OccurredAt        time.Time `json:"occurred_at"`
	// Details is metadata of the event, such as {"state", "reason"}; its
	// members grow with the event type. It never holds the task input.
	Details json.RawMessage `json:"details"`
	// Snapshot is the immutable state of the task the event reports.
	Snapshot json.RawMessage `json:"snapshot"`
}

// TaskSnapshot is the task state carried by a ResultEvent. Result keeps its
// JSON text exactly.
type TaskSnapshot struct {
	// SchemaVersion is 1 for the fields below.
	SchemaVersion    int             `json:"schema_version"`
	TaskID           string          `json:"task_id"`
	QueueID          string          `json:"queue_id"`
	State            string          `json:"state"`
	Revision         uint64          `json:"revision,string"`
	EffectUncertain  bool            `json:"effect_uncertain"`
	Result           json.RawMessage `json:"result,omitempty"`
	CurrentAttemptID string          `json:"current_attempt_id,omitempty"`
}

// DecodeSnapshot decodes e.Snapshot. Members it does not know are ignored,
// so callers that depend on their meaning check SchemaVersion.
func (e ResultEvent) DecodeSnapshot() (TaskSnapshot, error) {
	var s TaskSnapshot
	if len(e.Snapshot) == 0 || string(e.Snapshot) == "null" {
		return s, fmt.Errorf("orbit: event %s has no snapshot", e.ID)
	}
	if err := json.Unmarshal(e.Snapshot, &s); err != nil {
		return TaskSnapshot{}, fmt.Errorf("orbit: snapshot of event %s: %w", e.ID, err)
	}
	return s, nil
}

// DeliveryDetail is a delivery with the event it delivers. It never holds
// a lease secret.
type DeliveryDetail struct {
	Delivery EventDelivery `json:"delivery"`
	Event    ResultEvent   `json:"event"`
}

// ListEventDeliveriesRequest selects a page of ListEventDeliveries.
type ListEventDeliveriesRequest struct {
	// Limit is the page size, 1 to 100; 0 means the server's default (20).
	Limit int
	// Cursor is the NextCursor of the previous page, or empty for the
	// first page. It is valid only with the same subscription and State.
	Cursor string
	// State keeps only deliveries in this state (a DeliveryState
	// constant); empty means every state.
	State string
	// ExpiredReason, with State DeliveryStateExpired, keeps only the dead
	// letters set aside for this reason (K-6).
	ExpiredReason string
}

// DeliveryPage is one page of ListEventDeliveries. NextCursor is empty on
// the last page.
type DeliveryPage struct {
	Items      []EventDelivery `json:"items"`
	NextCursor string          `json:"next_cursor,omitempty"`
}

// ListEventDeliveries returns the deliveries of a subscription, newest
// first (GET /v1/subscriptions/{id}/deliveries, permission events:read).
// It is an operator's view, not a consistent snapshot and not a way to
// consume: deliveries may change state between pages, and results not yet
// materialised have no delivery.
func (c *Client) ListEventDeliveries(ctx context.Context, subscriptionID string, req ListEventDeliveriesRequest) (*DeliveryPage, error) {
	if err := checkIDs("ListEventDeliveries", "subscription id", subscriptionID); err != nil {
		return nil, err
	}
	q := url.Values{}
	if req.Limit > 0 {
		q.Set("limit", strconv.Itoa(req.Limit))
	}
	if req.Cursor != "" {
		q.Set("cursor", req.Cursor)
	}
	if req.State != "" {
		q.Set("state", req.State)
	}
	if req.ExpiredReason != "" {
		q.Set("expired_reason", req.ExpiredReason)
	}
	var page DeliveryPage
	if err := c.do(ctx, http.MethodGet, subscriptionPath(subscriptionID)+"/deliveries", q, "", nil, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// GetEventDelivery returns a delivery of a subscription with its event
// (GET /v1/subscriptions/{id}/deliveries/{delivery_id}, permission
// events:read). A delivery of another subscription is NOT_FOUND.
func (c *Client) GetEventDelivery(ctx context.Context, subscriptionID, deliveryID string) (*DeliveryDetail, error) {
	if err := checkIDs("GetEventDelivery", "subscription id", subscriptionID, "delivery id", deliveryID); err != nil {
		return nil, err
	}
	var d DeliveryDetail
	if err := c.do(ctx, http.MethodGet, deliveryPath(subscriptionID, deliveryID), nil, "", nil, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// RetryEventDeliveryRequest is the body of RetryEventDelivery. All three
// fields are always sent.
type RetryEventDeliveryRequest struct {
	// ExpectedRevision must equal the delivery's current Revision.
	ExpectedRevision uint64 `json:"expected_revision,string"`
	// Reason, 1 to 1024 characters, is recorded in the audit log.
	Reason string `json:"reason"`
	// AdditionalAttempts, 1 to 100, is added to the attempt budget; the
	// cumulative budget is at most 1,000,000.
	AdditionalAttempts int `json:"additional_attempts"`
}

// DeliveryResult is the receipt of RetryEventDelivery. Deduplicated is set
// when the idempotency key had been used before with the same request:
// Delivery is then the delivery as the original retry left it.
type DeliveryResult struct {
	Delivery     EventDelivery `json:"delivery"`
	Deduplicated bool          `json:"deduplicated"`
}

// RetryEventDelivery makes an EXPIRED delivery PENDING again with more
// attempts (POST /v1/subscriptions/{id}/deliveries/{delivery_id}:retry,
// permission events:manage). Attempts, lease epoch and event are kept. A
// delivery in any other state, a stale ExpectedRevision or a budget beyond
// the limit is STATE_CONFLICT. key is the Idempotency-Key: a repeat
// returns the original receipt and adds nothing.
func (c *Client) RetryEventDelivery(ctx context.Context, subscriptionID, deliveryID, key string, req RetryEventDeliveryRequest) (*DeliveryResult, error) {
	if err := checkIDs("RetryEventDelivery", "subscription id", subscriptionID, "delivery id", deliveryID); err != nil {
		return nil, err
	}
	if err := checkKey("RetryEventDelivery", key); err != nil {
		return nil, err
	}
	var res DeliveryResult
	if err := c.do(ctx, http.MethodPost, deliveryPath(subscriptionID, deliveryID)+":retry", nil, key, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

func subscriptionPath(id string) string {
	return "/v1/subscriptions/" + url.PathEscape(id)
}

func deliveryPath(subscriptionID, deliveryID string) string {
	return subscriptionPath(subscriptionID) + "/deliveries/" + url.PathEscape(deliveryID)
}

// checkIDs reports an empty path ID, given as name and value pairs: the
// request would name another route.
func checkIDs(op string, pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] == "" {
			return fmt.Errorf("orbit: %s: %s is empty", op, pairs[i])
		}
	}
	return nil
}
