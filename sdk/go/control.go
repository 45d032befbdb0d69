package orbit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Frames of consumer control (spec 08, K-1 … K-3).
const (
	frameEventExtend = "event.extend"
	frameEventNack   = "event.nack"
	frameEventReject = "event.reject"
)

// MaxControlReason is the longest reason of a NACK or a reject, in bytes.
const MaxControlReason = 512

// Reasons an EXPIRED delivery is set aside (EventDelivery.ExpiredReason).
const (
	ExpiredAttemptsExhausted = "ATTEMPTS_EXHAUSTED"
	ExpiredRejected          = "REJECTED"
	ExpiredSkipped           = "SKIPPED"
)

// ExtendResult is the server's answer to Extend.
type ExtendResult struct {
	DeliveryID string `json:"delivery_id"`
	EventID    string `json:"event_id"`
	Epoch      uint64 `json:"epoch,string"`
	// LeaseUntil is the lease's new end, by the server's clock.
	LeaseUntil time.Time `json:"lease_until"`
}

// ControlResult is the server's answer to Nack and Reject: the delivery's
// state after it.
type ControlResult struct {
	DeliveryID string `json:"delivery_id"`
	EventID    string `json:"event_id"`
	Epoch      uint64 `json:"epoch,string"`
	// State is PENDING (it will be delivered again from AvailableAt) or
	// EXPIRED (a dead letter, for ExpiredReason).
	State         string    `json:"state"`
	AvailableAt   time.Time `json:"available_at"`
	ExpiredReason string    `json:"expired_reason"`
}

// NackOptions are the optional parts of a NACK.
type NackOptions struct {
	// Delay, when not nil, is how long the delivery waits before it is
	// delivered again (0 to 24 h); nil means the subscription's retry
	// policy.
	Delay *time.Duration
	// Reason is kept as the delivery's last_error; see ControlReason.
	Reason string
}

type extendBody struct {
	AckProof
	ExtendMS int64 `json:"extend_ms,omitempty"`
}

type nackBody struct {
	AckProof
	DelayMS *int64 `json:"delay_ms,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

type rejectBody struct {
	AckProof
	Reason string `json:"reason"`
}

// Extend asks for more time on a delivery's lease (event.extend): its end
// becomes the server's time + by (0 means the server's lease duration),
// never earlier than it was. A lease that has already run out cannot be
// extended: that, like a proof a newer lease replaced, is an *APIError with
// Code CodeDeliveryLeaseLost, and the connection stays open.
func (c *EventConn) Extend(ctx context.Context, proof AckProof, by time.Duration) (*ExtendResult, error) {
	body := extendBody{AckProof: proof}
	if by > 0 {
		body.ExtendMS = max(by.Milliseconds(), 1)
	}
	f, err := c.request(ctx, frameEventExtend, body)
	if err != nil {
		return nil, err
	}
	return decodeReply[ExtendResult](f, "extend")
}

// Nack gives a delivery back at once because its handling failed
// (event.nack): it is delivered again after opts.Delay or the
// subscription's retry policy while attempts remain, and becomes EXPIRED
// (ATTEMPTS_EXHAUSTED) otherwise. The proof is spent: it can no longer
// acknowledge the delivery.
func (c *EventConn) Nack(ctx context.Context, proof AckProof, opts NackOptions) (*ControlResult, error) {
	body := nackBody{AckProof: proof, Reason: ControlReason(opts.Reason)}
	if opts.Delay != nil {
		ms := opts.Delay.Milliseconds()
		body.DelayMS = &ms
	}
	f, err := c.request(ctx, frameEventNack, body)
	if err != nil {
		return nil, err
	}
	return decodeReply[ControlResult](f, "nack")
}

// Reject sets a delivery aside for good (event.reject): it becomes EXPIRED
// (REJECTED) whatever its remaining attempts, with reason as its
// last_error, and comes back only through a retry.
func (c *EventConn) Reject(ctx context.Context, proof AckProof, reason string) (*ControlResult, error) {
	f, err := c.request(ctx, frameEventReject, rejectBody{AckProof: proof, Reason: rejectReason(reason)})
	if err != nil {
		return nil, err
	}
	return decodeReply[ControlResult](f, "reject")
}

// decodeReply decodes the body of an ack.
func decodeReply[T any](f frame, what string) (*T, error) {
	var res T
	if err := json.Unmarshal(f.Body, &res); err != nil {
		return nil, fmt.Errorf("orbit events: invalid %s answer: %w", what, err)
	}
	return &res, nil
}

// ControlReason makes s fit as a NACK's or a reject's reason: control
// characters become spaces and the text is cut to MaxControlReason bytes
// on a character boundary.
func ControlReason(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	for len(s) > MaxControlReason {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

// rejectReason is ControlReason, never empty.
func rejectReason(s string) string {
	if s = ControlReason(s); strings.TrimSpace(s) == "" {
		return "rejected by the consumer"
	}
	return s
}

// RetryError is the handler result that NACKs a delivery with a delay; see
// Retry.
type RetryError struct {
	Err   error
	After time.Duration
}

func (e *RetryError) Error() string {
	return fmt.Sprintf("retry after %v: %v", e.After, e.Err)
}

func (e *RetryError) Unwrap() error { return e.Err }

// Retry is what an EventHandler returns when the event should come again
// after the delay after (event.nack with delay_ms), instead of the
// subscription's retry policy. err says why; it becomes the delivery's
// last_error.
func Retry(err error, after time.Duration) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &RetryError{Err: err, After: max(after, 0)}
}

// RejectError is the handler result that rejects a delivery; see Reject.
type RejectError struct {
	Reason string
}

func (e *RejectError) Error() string { return "rejected: " + e.Reason }

// Reject is what an EventHandler returns for an event that can never be
// handled (a poison message): the delivery is set aside at once as EXPIRED
// (REJECTED) with reason as its last_error, whatever its remaining
// attempts, and comes back only through a retry by an operator.
func Reject(reason string) error { return &RejectError{Reason: reason} }
