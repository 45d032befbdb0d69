package events

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/batch"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/tracing"
	"github.com/orbitrun/orbit/internal/wsx"
	"github.com/orbitrun/orbit/modules/subscriptions"
	"github.com/orbitrun/orbit/modules/tasks"
)

// Frame types of orbit.events.v1 (seed 001 §5–7).
const (
	typeHello   = "events.hello"
	typeWelcome = "events.welcome"
	typeDeliver = "event.deliver"
	typeAck     = "event.ack"
	typePing    = "events.ping"
	typeReply   = "ack"
)

type helloBody struct {
	SubscriptionID *string `json:"subscription_id"`
	Capacity       *int    `json:"capacity"`
}

type welcomeBody struct {
	SessionID           string `json:"session_id"`
	SubscriptionID      string `json:"subscription_id"`
	Capacity            int    `json:"capacity"`
	LeaseDurationMS     int64  `json:"lease_duration_ms"`
	HeartbeatIntervalMS int64  `json:"heartbeat_interval_ms"`
	ServerTime          string `json:"server_time"`
	Enabled             bool   `json:"enabled"`
	// RedeliveryHorizon is the lowest sequence that can ever be
	// delivered to the subscription again (K-12).
	RedeliveryHorizon httpx.Uint64 `json:"redelivery_horizon"`
}

type deliverBody struct {
	Delivery    subscriptions.DeliveryView `json:"delivery"`
	Event       tasks.Event                `json:"event"`
	LeaseSecret string                     `json:"lease_secret"`
	// Trace is the W3C trace context of the event's task, or the delivery
	// span's when the node traces; left out when the task has none (O-5).
	Trace *tracing.Context `json:"trace,omitzero"`
}

type ackBody struct {
	DeliveryID  *string       `json:"delivery_id"`
	Epoch       *httpx.Uint64 `json:"epoch"`
	LeaseSecret *wsx.Secret   `json:"lease_secret"`
}

type pingReply struct {
	ServerTime string `json:"server_time"`
	Enabled    bool   `json:"enabled"`
}

// connect serves one event connection: hello, welcome, then requests until
// the connection ends. Claims run in the session's dispatcher, apart from
// the request loop, so pings and ACKs never wait behind a slow claim (E-6).
func (m *Module) connect(w http.ResponseWriter, r *http.Request) {
	m.entry.Serve(w, r, typeHello, m.hello)
}

// hello answers events.hello: it checks the subscription's owner and queue
// scope (E-2), records the session within the application's connection
// limit (N-4) and answers events.welcome (E-3).
func (m *Module) hello(c *wsx.Conn, f *wsx.Frame, r *http.Request) (wsx.Session, error) {
	var body helloBody
	if err := wsx.DecodeBody(f, &body); err != nil {
		return nil, err
	}
	if err := wsx.CheckHello("subscription_id", body.SubscriptionID, body.Capacity, maxCapacity); err != nil {
		return nil, err
	}
	sub, err := m.ownedSubscription(c.Context(), c.Principal(), *body.SubscriptionID, auth.ErrNotFound("subscription"))
	if err != nil {
		return nil, err
	}
	horizon, err := m.subs.RedeliveryHorizon(c.Context(), sub.QueueID)
	if err != nil {
		return nil, httpx.Errorf(httpx.CodeUnavailable, "temporarily unavailable; reconnect")
	}
	// Recording the session must not be cut short by the client going
	// away: a cancelled INSERT may still commit, and a session nobody
	// knows of would stay open for ever.
	openCtx, cancel := wsx.CleanupContext(c.Context())
	id, err := m.subs.EventSessionOpen(openCtx, &subscriptions.EventSessionOpenParams{
		SubscriptionID: sub.ID, CredentialID: c.Principal().CredentialID, ApplicationID: c.Principal().ApplicationID, NodeID: m.nodeID,
		Capacity: *body.Capacity, MaxPerApplication: m.cfg.MaxConnectionsPerApp,
	})
	cancel()
	if errors.Is(err, subscriptions.ErrApplicationConnections) {
		return nil, httpx.Errorf(httpx.CodeCapacityExceeded,
			"the application has %d event connections open across all nodes, its limit (events.max_connections_per_app); retry later",
			m.cfg.MaxConnectionsPerApp)
	}
	if err != nil {
		c.Unavailable(f.MessageID, "the session could not be recorded; reconnect", "open event session", err)
		return nil, nil
	}
	if err := c.Welcome(id, f, typeWelcome, welcomeBody{
		SessionID: id, SubscriptionID: sub.ID, Capacity: *body.Capacity,
		LeaseDurationMS:     m.cfg.LeaseDuration.Milliseconds(),
		HeartbeatIntervalMS: m.cfg.HeartbeatInterval.Milliseconds(),
		ServerTime:          httpx.FormatTime(db.Now()),
		Enabled:             sub.Enabled,
		RedeliveryHorizon:   httpx.Uint64(horizon),
	}); err != nil {
		// The connection ended before its welcome: the session never
		// started, so it is closed at once.
		m.closeSession(id)
		return nil, nil
	}
	return &session{
		m: m, c: c, id: id, subscription: sub, authHeader: r.Header.Get("Authorization"),
		freed: make(chan struct{}, 1), acks: batch.NewWaiting(acksPerConnection),
		sent: newSentLeases(2 * m.cfg.LeaseDuration),
	}, nil
}

// session is one event connection after its hello.
type session struct {
	m            *Module
	c            *wsx.Conn
	id           string
	subscription *subscriptions.Subscription
	authHeader   string
	// freed is signalled after an ACK, so the dispatcher claims again.
	freed chan struct{}
	// acks are the ACKs waiting for their batch's commit; the
	// connection's handler ends after their answers.
	acks *batch.Waiting
	// ackCount counts the ACKs recorded (first time), and the other counts
	// the extensions, NACKs and rejects recorded, for the session's close
	// log line (O-6).
	ackCount, extendCount, nackCount, rejectCount atomic.Int64
	// sent times the leases sent, for orbit_delivery_ack_seconds.
	sent *sentLeases
}

// countOutcome counts one committed outcome of a delivery of the
// session's subscription (subscriptions.OutcomeAck, …) in
// orbit_deliveries_total.
func (s *session) countOutcome(outcome string) {
	s.m.subs.DeliveryOutcome(s.subscription.ID, s.subscription.NamespaceID, outcome, 1)
}

// Counts returns what the session's consumer had recorded, for its close
// log line.
func (s *session) Counts() []slog.Attr {
	return []slog.Attr{
		slog.Int64("acked", s.ackCount.Load()),
		slog.Int64("extended", s.extendCount.Load()),
		slog.Int64("nacked", s.nackCount.Load()),
		slog.Int64("rejected", s.rejectCount.Load()),
	}
}

// End waits for the answers of the ACKs still in a batch, then closes the
// session's record.
func (s *session) End() {
	s.acks.Wait()
	s.m.closeSession(s.id)
}

// closeSession marks a recorded session closed, within its own bounded
// context since the connection's has usually ended.
func (m *Module) closeSession(id string) {
	ctx, cancel := wsx.CleanupContext(context.Background())
	defer cancel()
	if err := m.subs.EventSessionClose(ctx, id); err != nil {
		m.logger.Warn("close event session", "session_id", id, "err", err)
	}
}

// ownedSubscription returns the subscription if p owns it and holds a grant
// on its queue; otherwise NOT_FOUND, whether or not it exists (S-1, E-2).
// A subscription that does not exist (any more) is the error missing.
func (m *Module) ownedSubscription(ctx context.Context, p *auth.Principal, id string, missing error) (*subscriptions.Subscription, error) {
	sub, err := m.subs.SubscriptionGet(ctx, id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, missing
	}
	if err != nil {
		return nil, httpx.Errorf(httpx.CodeUnavailable, "temporarily unavailable; reconnect")
	}
	if sub.CredentialID != p.CredentialID || sub.NamespaceID != p.NamespaceID || !p.HasQueue(sub.QueueID) {
		return nil, auth.ErrNotFound("subscription")
	}
	return sub, nil
}

// Handle answers one client frame; it returns false when the connection is
// to close.
func (s *session) Handle(f *wsx.Frame) bool {
	switch f.Type {
	case typePing:
		return s.ping(f)
	case typeAck:
		return s.ack(f)
	case typeExtend:
		return s.extend(f)
	case typeNack:
		return s.nack(f)
	case typeReject:
		return s.reject(f)
	default:
		_ = s.c.SendError(f.MessageID, httpx.Errorf(httpx.CodeInvalidArgument, "unknown frame type for a consumer: %q", f.Type))
		return true
	}
}

// ping answers events.ping with the server time and whether the
// subscription is enabled, after re-checking the credential and the
// subscription's scope (E-14). A failed check answers with its error and
// closes.
func (s *session) ping(f *wsx.Frame) bool {
	var body struct{}
	if err := wsx.DecodeBody(f, &body); err != nil {
		_ = s.c.SendError(f.MessageID, err)
		return true
	}
	sub, err := s.recheck(s.c.Context())
	if err != nil {
		s.refuse(f.MessageID, err, "ping check failed")
		return false
	}
	s.c.Reply(f, typeReply, pingReply{ServerTime: httpx.FormatTime(db.Now()), Enabled: sub.Enabled})
	return true
}

// grant is what every claim and ACK of the session checks again in its
// transaction: the credential still active, holding events:consume and a
// grant on the subscription's queue.
func (s *session) grant() auth.Grant {
	return auth.Grant{
		CredentialID: s.c.Principal().CredentialID, Permission: auth.PermEventsConsume,
		QueueID: s.subscription.QueueID, What: "subscription",
	}
}

// refuse answers replyTo ("" for none) with err and closes the
// connection: 1000 when the subscription was deleted (K-11), otherwise
// as wsx.Conn.Refuse.
func (s *session) refuse(replyTo string, err error, reason string) {
	if errors.Is(err, subscriptions.ErrSubscriptionDeleted) {
		s.c.Fail(replyTo, err, wsx.CloseNormal, "subscription deleted")
		return
	}
	s.c.Refuse(replyTo, err, reason)
}

// recheck authenticates the connection's credential again and checks that
// it may still consume the subscription: not revoked, still holding
// events:consume, still owning the subscription and its queue grant, and
// the subscription not deleted (subscriptions.ErrSubscriptionDeleted). A
// failure is an *httpx.Error, UNAVAILABLE when the database failed.
func (s *session) recheck(ctx context.Context) (*subscriptions.Subscription, error) {
	p, err := s.m.auth.Authenticate(ctx, s.authHeader)
	if err == nil && !p.Can(auth.PermEventsConsume) {
		err = httpx.Errorf(httpx.CodePermissionDenied, "credential lacks permission %s", auth.PermEventsConsume)
	}
	var sub *subscriptions.Subscription
	if err == nil {
		sub, err = s.m.ownedSubscription(ctx, p, s.subscription.ID, subscriptions.ErrSubscriptionDeleted)
	}
	if err != nil {
		var he *httpx.Error
		if !errors.As(err, &he) {
			err = httpx.Errorf(httpx.CodeUnavailable, "temporarily unavailable; reconnect")
		}
		return nil, err
	}
	return sub, nil
}

// allowed runs recheck for the dispatcher, so that a client that never
// pings is still checked every heartbeat interval. A failure is reported
// without reply_to and closes the connection; allowed then returns false.
func (s *session) allowed(ctx context.Context) bool {
	if _, err := s.recheck(ctx); err != nil {
		if ctx.Err() == nil {
			s.refuse("", err, "credential check failed")
		}
		return false
	}
	return true
}

// ack checks event.ack and hands it to the node's ACK batcher (E-9 …
// E-11); acked answers it once its batch committed.
func (s *session) ack(f *wsx.Frame) bool {
	var body ackBody
	if err := wsx.DecodeBody(f, &body); err != nil {
		_ = s.c.SendError(f.MessageID, err)
		return true
	}
	if err := httpx.Required(
		httpx.Field{Path: "body.delivery_id", Present: body.DeliveryID != nil},
		httpx.Field{Path: "body.epoch", Present: body.Epoch != nil},
		httpx.Field{Path: "body.lease_secret", Present: body.LeaseSecret != nil},
	); err != nil {
		_ = s.c.SendError(f.MessageID, err)
		return true
	}
	if !httpx.ValidID(*body.DeliveryID) {
		_ = s.c.SendError(f.MessageID, httpx.Errorf(httpx.CodeInvalidArgument, "body.delivery_id must be 32 lowercase hex characters"))
		return true
	}
	// The request loop goes on while the ACK waits for its batch's commit;
	// the reply follows that commit. A connection has at most
	// acksPerConnection ACKs waiting.
	if !s.acks.Reserve(s.c.Context()) {
		return false
	}
	s.m.acks.Submit(&ackRequest{
		Params: subscriptions.DeliveryAckParams{
			Grant: s.grant(), SubscriptionID: s.subscription.ID, DeliveryID: *body.DeliveryID, Epoch: uint64(*body.Epoch),
			Secret: body.LeaseSecret.Encode(), SessionID: s.id,
		},
		Done: func(o subscriptions.AckOutcome, err error) {
			if err == nil {
				err = o.Err
			}
			s.acks.Answer(func() { s.acked(f, o.Result, err) })
		},
	})
	return true
}

// acked answers one event.ack after its batch: DELIVERY_LEASE_LOST keeps
// the connection; NOT_FOUND (a delivery outside the subscription) and a
// grant that no longer holds are answered and close it (seed 001 §7); a
// database failure gets UNAVAILABLE and closes it, so the client re-sends
// its proofs on a new one.
func (s *session) acked(f *wsx.Frame, res subscriptions.AckResult, err error) {
	switch {
	case errors.Is(err, subscriptions.ErrLeaseLost):
		_ = s.c.SendError(f.MessageID, err)
		return
	case auth.IsGrantError(err):
		s.c.Fail(f.MessageID, err, wsx.ClosePolicyViolation, "ack refused")
		return
	case err != nil:
		s.c.Unavailable(f.MessageID, "the ACK could not be recorded; reconnect and send it again", "ack", err)
		return
	}
	if !res.Deduplicated {
		s.ackCount.Add(1)
		s.countOutcome(subscriptions.OutcomeAck)
		if d, ok := s.sent.acked(res.DeliveryID, time.Now()); ok {
			s.m.metrics.ackSeconds.Observe(d.Seconds())
		}
		s.signalFreed()
	}
	s.c.Reply(f, typeReply, res)
}

// Dispatch claims deliveries for the connection whenever some may be
// claimable and sends event.deliver for each persisted lease. It returns
// when the connection ends. Before claiming on a poll it also materialises
// the subscription, so that results committed on other nodes are found.
func (s *session) Dispatch() {
	ctx := s.c.Context()
	ticker := time.NewTicker(s.m.cfg.PollInterval)
	defer ticker.Stop()
	// Pings re-check the credential, but the client decides when to
	// ping; the dispatcher re-checks on its own every heartbeat interval
	// before it claims more (E-14).
	recheck := time.NewTicker(s.m.cfg.HeartbeatInterval)
	defer recheck.Stop()
	app := s.c.Principal().ApplicationID
	materialize := true
	for ctx.Err() == nil {
		select {
		case <-recheck.C:
			if !s.allowed(ctx) {
				return
			}
		default:
		}
		claimable, mine := s.m.subs.Claimable(), s.m.subs.ClaimableFor(s.subscription.ID)
		// A slot freed before this claim is counted by it.
		select {
		case <-s.freed:
		default:
		}
		leases, full, err := s.claim(ctx, app, materialize)
		switch {
		case err == nil, errors.Is(err, errClaimPoolFull), ctx.Err() != nil:
		case errors.Is(err, subscriptions.ErrSubscriptionDeleted):
			// Deleted while connected (K-11): reported, then closed
			// normally; there is nothing to reconnect to.
			s.c.Fail("", err, wsx.CloseNormal, "subscription deleted")
			return
		case errors.Is(err, subscriptions.ErrSessionClosed):
			// Another node took this one for dead and closed its
			// sessions (N-3): reported, then closed with 1012 so that
			// the consumer reconnects at once; its proofs stay valid.
			s.c.Logger().Warn("session closed by the cluster", "session_id", s.id)
			s.c.Fail("", err, wsx.CloseServiceRestart, "session closed")
			return
		case errors.Is(err, subscriptions.ErrHistoryExpired):
			// Never jump to the latest position: report and close (E-15).
			s.c.Fail("", err, wsx.ClosePolicyViolation, "event history expired")
			return
		case auth.IsGrantError(err):
			// The claim found the authorization gone: reported without
			// reply_to, then closed (seed 001 §7).
			s.c.Fail("", err, wsx.ClosePolicyViolation, "credential check failed")
			return
		default:
			// A temporary failure inside the connection is reported and
			// closes it (seed 001 §7); the client reconnects with backoff,
			// and its leases and proofs stay valid on the new connection.
			s.c.Unavailable("", "deliveries cannot be claimed now; reconnect", "claim", err)
			return
		}
		for i := range leases {
			if !s.deliver(&leases[i]) {
				// The connection is closing: the rest are not sent either.
				for j := i + 1; j < len(leases); j++ {
					s.deliveryUnsent(&leases[j], wsx.ErrClosed)
				}
				return
			}
		}
		materialize = false
		// The claim leased what it could up to the connection's free
		// capacity. Deliveries that became claimable since it began
		// closed claimable or mine. When it did not fill the capacity, a
		// slot freed later finds nothing new: only when it did is a freed
		// slot worth another claim.
		freed := s.freed
		if !full {
			freed = nil
		}
		select {
		case <-ctx.Done():
		case <-claimable:
		case <-mine:
		case <-freed:
		case <-ticker.C:
			materialize = true
		case <-recheck.C:
			if !s.allowed(ctx) {
				return
			}
		}
	}
}

// deliver sends event.deliver for a persisted lease. A lease whose frame
// is not written is given back at once (deliveryUnsent). It returns false
// when the connection is closing.
func (s *session) deliver(l *subscriptions.Lease) bool {
	_, span, traceCtx := s.m.tracer.Start(s.c.Context(), spanDeliver, trace.SpanKindProducer, l.Event.Trace)
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(tracing.AttrDeliveryID.String(l.Delivery.ID), tracing.AttrSubscriptionID.String(s.subscription.ID),
			tracing.AttrEventID.String(l.Event.ID), tracing.AttrEventType.String(l.Event.Type),
			tracing.AttrEventSequence.Int64(int64(l.Event.Sequence)), tracing.AttrTaskID.String(l.Event.AggregateID),
			tracing.AttrSessionID.String(s.id))
	}
	body := deliverBody{Delivery: l.Delivery.View(), Event: l.Event, LeaseSecret: l.Secret, Trace: traceCtx.Ptr()}
	sent := true
	open := s.c.SendLease(typeDeliver, body, func(err error) { sent = false; s.deliveryUnsent(l, err) })
	if sent {
		now := time.Now()
		s.sent.sent(l.Delivery.ID, now)
		s.m.metrics.delivered(l, now)
	}
	return open
}

// deliveryUnsent gives back the lease of l, whose event.deliver was not
// sent (wsx.Conn.Unsent). A lease it cannot give back is recovered when it
// runs out (E-16).
func (s *session) deliveryUnsent(l *subscriptions.Lease, cause error) {
	s.c.Unsent(typeDeliver, cause, func(ctx context.Context) error {
		if _, err := s.m.subs.DeliveryUnsent(ctx, l, wsx.UnsentDelay); err != nil {
			return err
		}
		s.signalFreed()
		return nil
	}, "delivery_id", l.Delivery.ID, "event_id", l.Event.ID)
}

// signalFreed wakes the dispatcher after a lease of the session ended.
func (s *session) signalFreed() {
	select {
	case s.freed <- struct{}{}:
	default:
	}
}

// claim runs one claim through the node's claim pool, optionally
// materialising the subscription first. full reports that the
// connection's capacity is taken (subscriptions.Module.DeliveryClaim).
func (s *session) claim(ctx context.Context, app string, materialize bool) (leases []subscriptions.Lease, full bool, err error) {
	asked := time.Now()
	release, err := s.m.pool.acquire(ctx, app, s.subscription.ID)
	if err != nil {
		return nil, false, err
	}
	defer release()
	start := time.Now()
	s.m.metrics.claimWait.Observe(start.Sub(asked).Seconds())
	defer func() { s.m.metrics.claimSeconds.Observe(time.Since(start).Seconds()) }()
	ctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	if materialize {
		if _, _, err := s.m.subs.DeliveryMaterialize(ctx, s.subscription.ID); err != nil {
			return nil, false, err
		}
	}
	return s.m.subs.DeliveryClaim(ctx, &subscriptions.DeliveryClaimParams{
		SessionID: s.id, Grant: s.grant(), LeaseDuration: s.m.cfg.LeaseDuration, RecoverBatch: claimRecoverBatch,
	})
}
