package orbit

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Recovery of a subscription (K-7 … K-11, K-14): guarded bulk retry of dead
// letters, replay of acknowledged events, skip, delete, and the reports of
// work in flight for too long.
//
// A bulk retry and a replay may change thousands of deliveries, so each is
// two calls: a Count, which changes nothing and says how many deliveries
// the request selects now, then the operation with that count as
// expected. If the selection has changed meanwhile the operation changes
// nothing and fails with STATE_CONFLICT (its message gives the actual
// count): count again and confirm the new number.

// MaxRecoveryCount is the most deliveries one bulk retry or replay
// changes; a larger selection is INVALID_ARGUMENT (narrow the sequence
// range).
const MaxRecoveryCount = 10000

// RecoveryCount is the answer of a dry run: how many deliveries the request
// selects, and the IDs of the first ten in sequence order.
type RecoveryCount struct {
	Matched int      `json:"matched"`
	Sample  []string `json:"sample"`
}

// RecoveryOperation is the audited record of a bulk retry, a replay or a
// skip.
type RecoveryOperation struct {
	ID             string `json:"id"`
	SubscriptionID string `json:"subscription_id"`
	// Kind is RETRY, REPLAY or SKIP.
	Kind string `json:"kind"`
	// Count is how many deliveries the operation changed.
	Count     int       `json:"count"`
	CreatedAt time.Time `json:"created_at"`
}

// RecoveryResult is the receipt of RetryDeadLetters and ReplayEvents.
// Deduplicated is set when the idempotency key had been used before with
// the same request: the receipt is then the original one.
type RecoveryResult struct {
	Operation    RecoveryOperation `json:"operation"`
	Deduplicated bool              `json:"deduplicated"`
}

// DeadLetterFilter selects EXPIRED deliveries of a subscription.
type DeadLetterFilter struct {
	// ExpiredReason keeps only the dead letters set aside for this reason
	// (ATTEMPTS_EXHAUSTED, REJECTED or SKIPPED); empty means all.
	ExpiredReason string
	// FromSequence and ToSequence, when set, bound the events' sequences,
	// both ends included.
	FromSequence, ToSequence *uint64
}

// RetryDeadLettersRequest is what CountDeadLetters and RetryDeadLetters
// select and do.
type RetryDeadLettersRequest struct {
	Filter DeadLetterFilter
	// AdditionalAttempts, 1 to 100, is added to each delivery's attempt
	// budget.
	AdditionalAttempts int
	// Reason, 1 to 1024 characters, is recorded in the audit log.
	Reason string
}

type deadLetterFilterBody struct {
	State         string  `json:"state"`
	ExpiredReason string  `json:"expired_reason,omitempty"`
	FromSequence  *uint64 `json:"from_sequence,omitempty,string"`
	ToSequence    *uint64 `json:"to_sequence,omitempty,string"`
}

type retryDeadLettersBody struct {
	Filter             deadLetterFilterBody `json:"filter"`
	AdditionalAttempts int                  `json:"additional_attempts"`
	Reason             string               `json:"reason"`
	DryRun             bool                 `json:"dry_run,omitempty"`
	ExpectedCount      *int                 `json:"expected_count,omitempty"`
}

func (r RetryDeadLettersRequest) body() retryDeadLettersBody {
	return retryDeadLettersBody{
		Filter: deadLetterFilterBody{State: DeliveryStateExpired, ExpiredReason: r.Filter.ExpiredReason,
			FromSequence: r.Filter.FromSequence, ToSequence: r.Filter.ToSequence},
		AdditionalAttempts: r.AdditionalAttempts, Reason: r.Reason,
	}
}

// CountDeadLetters is the dry run of RetryDeadLetters
// (POST /v1/subscriptions/{id}/deliveries:retry with dry_run, permission
// events:manage): it changes nothing and returns how many EXPIRED
// deliveries req selects now. It needs no idempotency key.
func (c *Client) CountDeadLetters(ctx context.Context, subscriptionID string, req RetryDeadLettersRequest) (*RecoveryCount, error) {
	if err := checkIDs("CountDeadLetters", "subscription id", subscriptionID); err != nil {
		return nil, err
	}
	body := req.body()
	body.DryRun = true
	var res RecoveryCount
	if err := c.do(ctx, http.MethodPost, subscriptionPath(subscriptionID)+"/deliveries:retry", nil, "", body, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// RetryDeadLetters makes the EXPIRED deliveries req selects PENDING again
// with more attempts, like RetryEventDelivery for each of them, in one
// audited change (POST /v1/subscriptions/{id}/deliveries:retry,
// permission events:manage). expected is the Matched of CountDeadLetters:
// if the selection is no longer exactly that many deliveries, nothing
// changes and the error is STATE_CONFLICT. At most MaxRecoveryCount
// deliveries change per call. key is the Idempotency-Key: a repeat returns
// the original receipt.
//
//	n, err := client.CountDeadLetters(ctx, subID, req)
//	// … show n.Matched and n.Sample to the operator, who confirms …
//	res, err := client.RetryDeadLetters(ctx, subID, key, req, n.Matched)
func (c *Client) RetryDeadLetters(ctx context.Context, subscriptionID, key string, req RetryDeadLettersRequest, expected int) (*RecoveryResult, error) {
	if err := checkIDs("RetryDeadLetters", "subscription id", subscriptionID); err != nil {
		return nil, err
	}
	if err := checkKey("RetryDeadLetters", key); err != nil {
		return nil, err
	}
	if err := checkExpected("RetryDeadLetters", expected); err != nil {
		return nil, err
	}
	body := req.body()
	body.ExpectedCount = &expected
	var res RecoveryResult
	if err := c.do(ctx, http.MethodPost, subscriptionPath(subscriptionID)+"/deliveries:retry", nil, key, body, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// ReplayRequest selects the ACKED deliveries of a range of sequences to
// deliver again.
type ReplayRequest struct {
	// FromSequence and ToSequence bound the range, both ends included.
	// FromSequence below the subscription's RedeliveryHorizon is
	// EVENT_HISTORY_EXPIRED.
	FromSequence, ToSequence uint64
	// Reason, 1 to 1024 characters, is recorded in the audit log.
	Reason string
}

type replayBody struct {
	FromSequence  uint64 `json:"from_sequence,string"`
	ToSequence    uint64 `json:"to_sequence,string"`
	Reason        string `json:"reason"`
	DryRun        bool   `json:"dry_run,omitempty"`
	ExpectedCount *int   `json:"expected_count,omitempty"`
}

// CountReplay is the dry run of ReplayEvents (POST
// /v1/subscriptions/{id}:replay with dry_run, permission events:manage):
// it changes nothing and returns how many ACKED deliveries the range holds
// now.
func (c *Client) CountReplay(ctx context.Context, subscriptionID string, req ReplayRequest) (*RecoveryCount, error) {
	if err := checkIDs("CountReplay", "subscription id", subscriptionID); err != nil {
		return nil, err
	}
	var res RecoveryCount
	body := replayBody{FromSequence: req.FromSequence, ToSequence: req.ToSequence, Reason: req.Reason, DryRun: true}
	if err := c.do(ctx, http.MethodPost, subscriptionPath(subscriptionID)+":replay", nil, "", body, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// ReplayEvents re-opens the ACKED deliveries of the range (POST
// /v1/subscriptions/{id}:replay, permission events:manage): each becomes
// PENDING, keeps its ID and attempts, and gets its budget topped up to the
// subscription's max_attempts from now. expected is the Matched of
// CountReplay, guarded as in RetryDeadLetters; key is the Idempotency-Key.
// A receiver that deduplicates by event ID, such as an Inbox,
// acknowledges a replayed event without applying it twice.
func (c *Client) ReplayEvents(ctx context.Context, subscriptionID, key string, req ReplayRequest, expected int) (*RecoveryResult, error) {
	if err := checkIDs("ReplayEvents", "subscription id", subscriptionID); err != nil {
		return nil, err
	}
	if err := checkKey("ReplayEvents", key); err != nil {
		return nil, err
	}
	if err := checkExpected("ReplayEvents", expected); err != nil {
		return nil, err
	}
	body := replayBody{FromSequence: req.FromSequence, ToSequence: req.ToSequence, Reason: req.Reason, ExpectedCount: &expected}
	var res RecoveryResult
	if err := c.do(ctx, http.MethodPost, subscriptionPath(subscriptionID)+":replay", nil, key, body, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// checkExpected refuses an expected count no operation can match.
func checkExpected(op string, expected int) error {
	if expected < 0 || expected > MaxRecoveryCount {
		return errors.New("orbit: " + op + ": expected count must be 0 to " + strconv.Itoa(MaxRecoveryCount))
	}
	return nil
}

// SkipRequest is the body of SkipSubscription.
type SkipRequest struct {
	// ToSequence is where the cursor moves; ignored when ToHead is set.
	ToSequence uint64
	// ToHead skips to the queue's committed head when the skip runs.
	ToHead bool
	// ExpectedRevision must equal the subscription's current Revision.
	ExpectedRevision uint64
	// Reason, 1 to 1024 characters, is recorded in the audit log.
	Reason string
}

type skipBody struct {
	ToSequence       string `json:"to_sequence"`
	ExpectedRevision uint64 `json:"expected_revision,string"`
	Reason           string `json:"reason"`
}

// SkipResult is the receipt of SkipSubscription: the subscription after
// the skip and the operation, whose Count is the PENDING deliveries
// skipped.
type SkipResult struct {
	Subscription Subscription      `json:"subscription"`
	Operation    RecoveryOperation `json:"operation"`
	Deduplicated bool              `json:"deduplicated"`
}

// SkipSubscription gives up delivering the events up to req's sequence
// (POST /v1/subscriptions/{id}:skip, permission events:manage): the cursor
// moves forward (never back), PENDING deliveries below it become EXPIRED
// with the reason SKIPPED, LEASED ones finish as they would and are not
// delivered again. It is also the repair of a subscription stopped by
// EVENT_HISTORY_EXPIRED: skip to at least RedeliveryHorizon − 1. A skip is
// a configuration change: the revision increases. key is the
// Idempotency-Key.
func (c *Client) SkipSubscription(ctx context.Context, subscriptionID, key string, req SkipRequest) (*SkipResult, error) {
	if err := checkIDs("SkipSubscription", "subscription id", subscriptionID); err != nil {
		return nil, err
	}
	if err := checkKey("SkipSubscription", key); err != nil {
		return nil, err
	}
	body := skipBody{ToSequence: strconv.FormatUint(req.ToSequence, 10), ExpectedRevision: req.ExpectedRevision, Reason: req.Reason}
	if req.ToHead {
		body.ToSequence = "head"
	}
	var res SkipResult
	if err := c.do(ctx, http.MethodPost, subscriptionPath(subscriptionID)+":skip", nil, key, body, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// DeleteSubscriptionRequest is the body of DeleteSubscription.
type DeleteSubscriptionRequest struct {
	// ExpectedRevision must equal the subscription's current Revision.
	ExpectedRevision uint64 `json:"expected_revision,string"`
	// Reason, 1 to 1024 characters, is recorded in the audit log.
	Reason string `json:"reason"`
}

// SubscriptionDeletion is the record of a deleted subscription.
type SubscriptionDeletion struct {
	SubscriptionID string    `json:"subscription_id"`
	Name           string    `json:"name"`
	Revision       uint64    `json:"revision,string"`
	DeletedAt      time.Time `json:"deleted_at"`
}

// DeletionResult is the receipt of DeleteSubscription.
type DeletionResult struct {
	Deletion     SubscriptionDeletion `json:"deletion"`
	Deduplicated bool                 `json:"deduplicated"`
}

// DeleteSubscription deletes a subscription at once (DELETE
// /v1/subscriptions/{id}, permission events:manage): it stops, its
// consumers get SUBSCRIPTION_DELETED and are closed, its place among the
// namespace's 64 and its name are free, and every later call naming it is
// NOT_FOUND. Its deliveries are removed in the background. key is the
// Idempotency-Key: a repeat returns the original receipt.
func (c *Client) DeleteSubscription(ctx context.Context, subscriptionID, key string, req DeleteSubscriptionRequest) (*DeletionResult, error) {
	if err := checkIDs("DeleteSubscription", "subscription id", subscriptionID); err != nil {
		return nil, err
	}
	if err := checkKey("DeleteSubscription", key); err != nil {
		return nil, err
	}
	var res DeletionResult
	if err := c.do(ctx, http.MethodDelete, subscriptionPath(subscriptionID), nil, key, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// StuckRequest selects a page of work in flight for longer than OlderThan.
type StuckRequest struct {
	// OlderThan is how long the current lease has been held at least;
	// it is sent in whole milliseconds.
	OlderThan time.Duration
	// Limit is the page size, 1 to 100; 0 means the server's default (20).
	Limit int
	// Cursor is the NextCursor of the previous page, or empty. It is valid
	// only with the same OlderThan.
	Cursor string
}

func (r StuckRequest) query(q url.Values) url.Values {
	q.Set("older_than_ms", strconv.FormatInt(r.OlderThan.Milliseconds(), 10))
	if r.Limit > 0 {
		q.Set("limit", strconv.Itoa(r.Limit))
	}
	if r.Cursor != "" {
		q.Set("cursor", r.Cursor)
	}
	return q
}

// StuckDelivery is a LEASED delivery with who holds it and since when.
type StuckDelivery struct {
	EventDelivery
	// LeaseSessionID is the session_id of the event connection holding
	// the lease.
	LeaseSessionID string `json:"lease_session_id"`
	// LeasedAt is when the current lease began.
	LeasedAt time.Time `json:"leased_at"`
}

// StuckDeliveryPage is one page of ListStuckDeliveries.
type StuckDeliveryPage struct {
	Items      []StuckDelivery `json:"items"`
	NextCursor string          `json:"next_cursor,omitempty"`
}

// ListStuckDeliveries lists the LEASED deliveries of a subscription whose
// lease began at least req.OlderThan ago (GET
// /v1/subscriptions/{id}/deliveries?state=LEASED&older_than_ms=N,
// permission events:read), so an operator sees a stuck handler before its
// lease expires.
func (c *Client) ListStuckDeliveries(ctx context.Context, subscriptionID string, req StuckRequest) (*StuckDeliveryPage, error) {
	if err := checkIDs("ListStuckDeliveries", "subscription id", subscriptionID); err != nil {
		return nil, err
	}
	if req.OlderThan < 0 {
		return nil, errors.New("orbit: ListStuckDeliveries: OlderThan must not be negative")
	}
	q := req.query(url.Values{"state": {DeliveryStateLeased}})
	var page StuckDeliveryPage
	if err := c.do(ctx, http.MethodGet, subscriptionPath(subscriptionID)+"/deliveries", q, "", nil, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// StuckTask is a RUNNING task with the worker session holding its lease and
// when its attempt began.
type StuckTask struct {
	Task
	// LeaseSessionID is the session_id of the worker connection holding
	// the task's lease.
	LeaseSessionID string `json:"lease_session_id"`
	// LeasedAt is when the current attempt began.
	LeasedAt time.Time `json:"leased_at"`
}

// StuckTaskPage is one page of ListStuckTasks.
type StuckTaskPage struct {
	Items      []StuckTask `json:"items"`
	NextCursor string      `json:"next_cursor,omitempty"`
}

// ListStuckTasks lists the RUNNING tasks of a queue whose current attempt
// began at least req.OlderThan ago (GET
// /v1/tasks?queue_id=…&state=RUNNING&older_than_ms=N, permission
// tasks:read).
func (c *Client) ListStuckTasks(ctx context.Context, queueID string, req StuckRequest) (*StuckTaskPage, error) {
	if err := checkIDs("ListStuckTasks", "queue id", queueID); err != nil {
		return nil, err
	}
	if req.OlderThan < 0 {
		return nil, errors.New("orbit: ListStuckTasks: OlderThan must not be negative")
	}
	q := req.query(url.Values{"queue_id": {queueID}, "state": {TaskStateRunning}})
	var page StuckTaskPage
	if err := c.do(ctx, http.MethodGet, "/v1/tasks", q, "", nil, &page); err != nil {
		return nil, err
	}
	return &page, nil
}
