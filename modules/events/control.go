package events

import (
	"context"
	"errors"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/batch"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/wsx"
	"github.com/orbitrun/orbit/modules/subscriptions"
)

// Frame types of consumer control (K-1 … K-3): each is fenced by the same
// proof as event.ack and answered by ack or error with reply_to.
const (
	typeExtend = "event.extend"
	typeNack   = "event.nack"
	typeReject = "event.reject"
)

// DefaultMaxLeaseExtension bounds event.extend's extend_ms.
const DefaultMaxLeaseExtension = 12 * time.Hour

// maxNackDelay bounds event.nack's delay_ms, as a retry policy's delays.
const maxNackDelay = 24 * time.Hour

type extendBody struct {
	DeliveryID  *string       `json:"delivery_id"`
	Epoch       *httpx.Uint64 `json:"epoch"`
	LeaseSecret *wsx.Secret   `json:"lease_secret"`
	ExtendMS    *int64        `json:"extend_ms"`
}

type nackBody struct {
	DeliveryID  *string       `json:"delivery_id"`
	Epoch       *httpx.Uint64 `json:"epoch"`
	LeaseSecret *wsx.Secret   `json:"lease_secret"`
	DelayMS     *int64        `json:"delay_ms"`
	Reason      *string       `json:"reason"`
}

type rejectBody struct {
	DeliveryID  *string       `json:"delivery_id"`
	Epoch       *httpx.Uint64 `json:"epoch"`
	LeaseSecret *wsx.Secret   `json:"lease_secret"`
	Reason      *string       `json:"reason"`
}

// controlRequest is one extend, NACK or reject waiting for its batch.
type controlRequest = batch.Request[subscriptions.DeliveryControlParams, subscriptions.ControlOutcome]

// newControlBatcher returns the node's batcher of extensions, NACKs and
// rejects: like ACKs, those of every connection on the node share
// transactions, and each is answered after the commit that recorded it.
func newControlBatcher(deliveries Deliveries) *batch.Batcher[*controlRequest] {
	return batch.New(ackFlushers, maxAckBatch, func(requests []*controlRequest) {
		batch.Record(requests, ackTimeout, deliveries.DeliveryControlBatch)
	})
}

// extend checks event.extend (K-1) and hands it to the control batcher.
func (s *session) extend(f *wsx.Frame) bool {
	var body extendBody
	if err := wsx.DecodeBody(f, &body); err != nil {
		_ = s.c.SendError(f.MessageID, err)
		return true
	}
	p, err := s.controlParams(subscriptions.ControlExtend, body.DeliveryID, body.Epoch, body.LeaseSecret)
	if err == nil {
		p.ExtendBy = s.m.cfg.LeaseDuration
		if body.ExtendMS != nil {
			limit := s.m.cfg.MaxLeaseExtension.Milliseconds()
			if *body.ExtendMS < 1 || *body.ExtendMS > limit {
				err = httpx.Errorf(httpx.CodeInvalidArgument, "body.extend_ms must be 1 to %d", limit)
			}
			p.ExtendBy = time.Duration(*body.ExtendMS) * time.Millisecond
		}
	}
	return s.submitControl(f, p, err)
}

// nack checks event.nack (K-2) and hands it to the control batcher.
func (s *session) nack(f *wsx.Frame) bool {
	var body nackBody
	if err := wsx.DecodeBody(f, &body); err != nil {
		_ = s.c.SendError(f.MessageID, err)
		return true
	}
	p, err := s.controlParams(subscriptions.ControlNack, body.DeliveryID, body.Epoch, body.LeaseSecret)
	if err == nil && body.DelayMS != nil {
		if *body.DelayMS < 0 || *body.DelayMS > maxNackDelay.Milliseconds() {
			err = httpx.Errorf(httpx.CodeInvalidArgument, "body.delay_ms must be 0 to %d", maxNackDelay.Milliseconds())
		}
		delay := time.Duration(*body.DelayMS) * time.Millisecond
		p.Delay = &delay
	}
	if err == nil && body.Reason != nil {
		p.Reason, err = checkControlReason(*body.Reason)
	}
	return s.submitControl(f, p, err)
}

// reject checks event.reject (K-3) and hands it to the control batcher.
func (s *session) reject(f *wsx.Frame) bool {
	var body rejectBody
	if err := wsx.DecodeBody(f, &body); err != nil {
		_ = s.c.SendError(f.MessageID, err)
		return true
	}
	p, err := s.controlParams(subscriptions.ControlReject, body.DeliveryID, body.Epoch, body.LeaseSecret)
	if err == nil {
		err = httpx.Required(httpx.Field{Path: "body.reason", Present: body.Reason != nil})
	}
	if err == nil {
		p.Reason, err = checkControlReason(*body.Reason)
	}
	if err == nil && p.Reason == "" {
		err = httpx.Errorf(httpx.CodeInvalidArgument, "body.reason must not be empty")
	}
	return s.submitControl(f, p, err)
}

// checkControlReason checks a NACK's or a reject's reason: at most
// MaxControlReason bytes of UTF-8, without control characters.
func checkControlReason(reason string) (string, error) {
	if len(reason) > subscriptions.MaxControlReason || !utf8.ValidString(reason) {
		return "", httpx.Errorf(httpx.CodeInvalidArgument, "body.reason must be at most %d bytes of UTF-8", subscriptions.MaxControlReason)
	}
	for _, r := range reason {
		if unicode.IsControl(r) {
			return "", httpx.Errorf(httpx.CodeInvalidArgument, "body.reason must not contain control characters")
		}
	}
	return reason, nil
}

// controlParams checks the proof every control frame carries, as event.ack
// does, and returns the request's params bound to the session.
func (s *session) controlParams(verb subscriptions.ControlVerb, deliveryID *string, epoch *httpx.Uint64, secret *wsx.Secret) (*subscriptions.DeliveryControlParams, error) {
	if err := httpx.Required(
		httpx.Field{Path: "body.delivery_id", Present: deliveryID != nil},
		httpx.Field{Path: "body.epoch", Present: epoch != nil},
		httpx.Field{Path: "body.lease_secret", Present: secret != nil},
	); err != nil {
		return nil, err
	}
	if !httpx.ValidID(*deliveryID) {
		return nil, httpx.Errorf(httpx.CodeInvalidArgument, "body.delivery_id must be 32 lowercase hex characters")
	}
	return &subscriptions.DeliveryControlParams{
		Verb: verb, Grant: s.grant(), SubscriptionID: s.subscription.ID, DeliveryID: *deliveryID,
		Epoch: uint64(*epoch), Secret: secret.Encode(),
	}, nil
}

// submitControl answers a frame that failed its checks with err, or hands
// p to the node's control batcher; controlled answers it once its batch
// committed. It returns false when the connection is closing.
func (s *session) submitControl(f *wsx.Frame, p *subscriptions.DeliveryControlParams, err error) bool {
	if err != nil {
		_ = s.c.SendError(f.MessageID, err)
		return true
	}
	if !s.acks.Reserve(s.c.Context()) {
		return false
	}
	s.m.controls.Submit(&controlRequest{
		Params: *p,
		Done: func(o subscriptions.ControlOutcome, err error) {
			if err == nil {
				err = o.Err
			}
			s.acks.Answer(func() { s.controlled(f, o, err) })
		},
	})
	return true
}

// controlled answers one extend, NACK or reject after its batch, with the
// same rules as acked. A NACK or a reject frees the connection's capacity
// slot at once (K-5).
func (s *session) controlled(f *wsx.Frame, o subscriptions.ControlOutcome, err error) {
	switch {
	case errors.Is(err, subscriptions.ErrLeaseLost):
		_ = s.c.SendError(f.MessageID, err)
		return
	case auth.IsGrantError(err):
		s.c.Fail(f.MessageID, err, wsx.ClosePolicyViolation, f.Type+" refused")
		return
	case err != nil:
		s.c.Unavailable(f.MessageID, "the request could not be recorded; reconnect", f.Type, err)
		return
	}
	switch f.Type {
	case typeExtend:
		s.extendCount.Add(1)
	case typeNack:
		s.nackCount.Add(1)
	case typeReject:
		s.rejectCount.Add(1)
	}
	if o.Released {
		s.signalFreed()
	}
	s.c.Reply(f, typeReply, o.Result)
}

// waitBatches waits for the node's ACK and control batches to finish,
// bounded by ctx, when the entry stops.
func (m *Module) waitBatches(ctx context.Context) error {
	if err := m.acks.Wait(ctx); err != nil {
		return err
	}
	return m.controls.Wait(ctx)
}
