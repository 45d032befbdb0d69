package orbit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"time"
)

// eventJob is one delivery handed to the handler.
type eventJob struct {
	d      *Delivery
	proof  AckProof
	ctx    context.Context
	cancel context.CancelFunc
	err    error

	// The lease by this process's clock: when it ends (from its receipt
	// and the welcome's lease duration, then from each extension), how
	// long each extension asks for, how much was extended in all, and
	// whether an extension waits for its answer.
	leaseUntil time.Time
	leaseFor   time.Duration
	extended   time.Duration
	extending  bool
}

// pendingAck is the latest proof of a delivery whose handler returned nil
// and whose acknowledgement the server has not answered yet.
type pendingAck struct {
	proof   AckProof
	eventID string
	sentOn  *consumerConn // the connection it awaits an answer on, or nil
}

// consumerConn is one welcomed connection of a Run.
type consumerConn struct {
	ec      *EventConn
	ctx     context.Context // cancelled when the connection is dropped
	cancel  context.CancelFunc
	beat    *time.Ticker
	lease   *time.Ticker // checks the leases of running handlers
	since   time.Time
	pinging bool
	enabled bool
}

// dialOutcome is the end of one connection attempt.
type dialOutcome struct {
	ec         *EventConn
	retryAfter time.Duration
	err        error
	intents    []AckProof // the stored ACK intents read before dialling
}

// connItem is a delivery, or the end of a connection, from its reader.
type connItem struct {
	conn *consumerConn
	d    *Delivery
	err  error
}

// ackOutcome is the answer to one event.ack.
type ackOutcome struct {
	conn  *consumerConn
	proof AckProof
	res   *AckResult
	err   error
}

// controlOutcome is the answer to one event.nack or event.reject.
type controlOutcome struct {
	proof  AckProof
	reject bool
	res    *ControlResult
	err    error
}

// extendOutcome is the answer to one event.extend.
type extendOutcome struct {
	conn  *consumerConn
	proof AckProof
	by    time.Duration
	sent  time.Time
	err   error
}

// pingOutcome is the answer to one events.ping.
type pingOutcome struct {
	conn *consumerConn
	res  *PingResult
	err  error
}

// consumerRun is the state of one Run. Everything but the handlers and the
// goroutines that wait for the network runs in Run's goroutine.
type consumerRun struct {
	c   *EventConsumer
	log *slog.Logger

	handlerCtx     context.Context
	cancelHandlers context.CancelFunc
	handlers       sync.WaitGroup
	finished       chan *eventJob // buffered to Concurrency

	// background goroutines post to the channels below until quit closes.
	background sync.WaitGroup
	quit       chan struct{}
	items      chan connItem
	acks       chan ackOutcome
	pings      chan pingOutcome
	controls   chan controlOutcome
	extends    chan extendOutcome

	queued  []*eventJob // received and not started, in arrival order
	running map[AckProof]*eventJob
	pending map[string]*pendingAck // by delivery id

	conn          *consumerConn
	connecting    chan dialOutcome // nil unless a connection attempt runs
	cancelConnect context.CancelFunc
	retry         *time.Timer // nil unless waiting to reconnect
	failures      int
	connected     bool // a connection was welcomed before

	draining bool
	deadline time.Time // when a shutdown gives up; set once draining
}

// newConsumerRun prepares one Run. Handler contexts keep ctx's values; a
// shutdown cancels them.
func newConsumerRun(ctx context.Context, c *EventConsumer) *consumerRun {
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	return &consumerRun{
		c: c, log: c.log.With(slog.String("subscription_id", c.cfg.SubscriptionID)),
		handlerCtx: hctx, cancelHandlers: cancel,
		finished: make(chan *eventJob, c.cfg.Concurrency),
		quit:     make(chan struct{}),
		items:    make(chan connItem),
		acks:     make(chan ackOutcome),
		pings:    make(chan pingOutcome),
		controls: make(chan controlOutcome),
		extends:  make(chan extendOutcome),
		running:  make(map[AckProof]*eventJob),
		pending:  make(map[string]*pendingAck),
	}
}

// run is the loop of Run: every state change happens here.
func (r *consumerRun) run(ctx context.Context) error {
	var bound <-chan time.Time
	var boundTimer *time.Timer
	defer func() {
		if boundTimer != nil {
			boundTimer.Stop()
		}
	}()
	stop := ctx.Done()
	r.startConnect()
	for {
		if r.draining && len(r.running) == 0 && len(r.pending) == 0 {
			r.finish()
			return nil
		}
		var beat, lease, retry <-chan time.Time
		if r.conn != nil {
			beat, lease = r.conn.beat.C, r.conn.lease.C
		}
		if r.retry != nil {
			retry = r.retry.C
		}
		var err error
		select {
		case <-stop:
			stop = nil
			r.beginDrain()
			boundTimer = time.NewTimer(r.c.cfg.ShutdownTimeout)
			bound = boundTimer.C
		case <-bound:
			r.log.Warn("orbit consumer: shutdown timeout passed; abandoning unanswered acknowledgements, whose events may be delivered again",
				slog.Int("unanswered", len(r.pending)), slog.Int("running", len(r.running)))
			r.finish()
			return nil
		case j := <-r.finished:
			r.handlerDone(j)
		case res := <-r.connecting:
			r.cancelConnect()
			r.connecting, r.cancelConnect = nil, nil
			err = r.dialed(res)
		case <-retry:
			r.retry = nil
			r.startConnect()
		case <-beat:
			r.ping()
		case <-lease:
			r.checkLeases()
		case o := <-r.controls:
			r.controlled(o)
		case o := <-r.extends:
			r.extendDone(o)
		case it := <-r.items:
			err = r.item(it)
		case a := <-r.acks:
			err = r.acked(a)
		case p := <-r.pings:
			err = r.pinged(p)
		}
		if err != nil {
			r.abort(err)
			return err
		}
	}
}

// stopBackground stops the goroutines that wait for the network and waits
// for them; the connection is closed by then.
func (r *consumerRun) stopBackground() {
	r.cancelHandlers()
	close(r.quit)
	r.background.Wait()
}

// goBackground runs f in a background goroutine.
func (r *consumerRun) goBackground(f func()) {
	r.background.Add(1)
	go func() {
		defer r.background.Done()
		f()
	}()
}

// post sends v on ch unless Run is ending.
func post[T any](r *consumerRun, ch chan T, v T) {
	select {
	case ch <- v:
	case <-r.quit:
	}
}

// startConnect begins a connection attempt in the background.
func (r *consumerRun) startConnect() {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan dialOutcome, 1)
	r.connecting, r.cancelConnect = ch, cancel
	cfg := EventConnConfig{
		BaseURL: r.c.cfg.BaseURL, Token: r.c.cfg.Token, SubscriptionID: r.c.cfg.SubscriptionID,
		Capacity: r.c.cfg.Capacity, Dialer: r.c.cfg.Dialer, Trace: r.c.cfg.Trace,
	}
	r.goBackground(func() {
		intents, err := r.loadAckIntents(ctx)
		if err != nil {
			ch <- dialOutcome{err: err}
			return
		}
		ec, retryAfter, err := dialEvents(ctx, cfg)
		ch <- dialOutcome{ec: ec, retryAfter: retryAfter, err: err, intents: intents}
	})
}

// dialed takes the result of a connection attempt: it starts using the
// connection and sends the acknowledgements that wait for an answer, or
// schedules a retry. It returns an error only when retrying cannot help.
func (r *consumerRun) dialed(res dialOutcome) error {
	if res.err != nil {
		if handshakeFatal(res.err) || sessionFatal(res.err) {
			return res.err
		}
		delay := r.scheduleRetry(res.retryAfter)
		r.log.Warn("orbit consumer: cannot connect; retrying", slog.String("error", res.err.Error()),
			slog.Int("failures", r.failures), slog.Duration("delay", delay))
		return nil
	}
	w := res.ec.Welcome()
	ctx, cancel := context.WithCancel(context.Background())
	conn := &consumerConn{ec: res.ec, ctx: ctx, cancel: cancel, beat: time.NewTicker(w.HeartbeatInterval),
		lease: time.NewTicker(leaseCheckInterval(w.LeaseDuration)), since: time.Now(), enabled: w.Enabled}
	r.conn = conn
	if r.connected {
		r.c.reconnects.Add(1)
	}
	r.connected = true
	r.log.Info("orbit consumer: connected", slog.String("session_id", w.SessionID), slog.Int("capacity", w.Capacity),
		slog.Bool("enabled", w.Enabled), slog.Int("unanswered_acks", len(r.pending)))
	// Acknowledgements first: a proof sent again settles its delivery
	// before new deliveries arrive on this connection.
	r.takeAckIntents(res.intents)
	for _, p := range r.pending {
		if r.conn != conn {
			break
		}
		r.sendAck(p)
	}
	if r.conn == conn {
		r.goBackground(func() {
			for {
				d, err := conn.ec.Next(conn.ctx)
				post(r, r.items, connItem{conn: conn, d: d, err: err})
				if err != nil {
					return
				}
			}
		})
	}
	return nil
}

// scheduleRetry arms the reconnection timer with the next backoff delay,
// at least minDelay, and returns the delay.
func (r *consumerRun) scheduleRetry(minDelay time.Duration) time.Duration {
	delay := max(backoffDelay(r.c.cfg.Backoff, r.failures, rand.Int64N), minDelay)
	r.failures++
	r.retry = time.NewTimer(delay)
	return delay
}

// lose drops the current connection after a failure and schedules a
// reconnection. Acknowledgements it carried without an answer are sent
// again on the next connection; deliveries not started yet stay queued,
// since their proofs remain valid. A connection that lasted longer than
// the largest backoff resets the backoff.
func (r *consumerRun) lose(err error) {
	conn := r.conn
	if conn == nil {
		return
	}
	r.log.Warn("orbit consumer: connection lost; reconnecting", slog.String("session_id", conn.ec.Welcome().SessionID),
		slog.String("error", errString(err)))
	if time.Since(conn.since) > r.c.cfg.Backoff.Max {
		r.failures = 0
	}
	r.drop(conn)
	r.scheduleRetry(0)
}

// drop forgets the current connection and ends it at once.
func (r *consumerRun) drop(conn *consumerConn) {
	conn.cancel()
	conn.beat.Stop()
	conn.lease.Stop()
	conn.ec.abort()
	for _, p := range r.pending {
		if p.sentOn == conn {
			p.sentOn = nil
		}
	}
	r.conn = nil
}

// item takes a delivery, or the end of the connection, from the reader.
func (r *consumerRun) item(it connItem) error {
	if it.conn != r.conn {
		return nil // from a connection already dropped
	}
	if it.err != nil {
		if sessionFatal(it.err) {
			return it.err
		}
		r.lose(it.err)
		return nil
	}
	d := it.d
	r.c.delivered.Add(1)
	log := r.log.With(slog.String("delivery_id", d.ID), slog.String("event_id", d.Event.ID), slog.Uint64("epoch", d.Proof.Epoch))
	if r.draining {
		log.Debug("orbit consumer: delivery ignored during shutdown; its lease will run out")
		return nil
	}
	if r.running[d.Proof] != nil || r.queuedIndex(d.Proof) >= 0 {
		return nil // the same lease twice
	}
	log.Debug("orbit consumer: delivery received", slog.String("type", d.Event.Type), slog.Int("attempts", d.Attempts))
	ctx, cancel := context.WithCancel(r.handlerCtx)
	leaseFor := it.conn.ec.Welcome().LeaseDuration
	r.queued = append(r.queued, &eventJob{d: d, proof: d.Proof, ctx: ctx, cancel: cancel,
		leaseUntil: time.Now().Add(leaseFor), leaseFor: leaseFor})
	r.startQueued()
	return nil
}

// queuedIndex returns the position of the lease in the queue, or -1.
func (r *consumerRun) queuedIndex(p AckProof) int {
	for i, j := range r.queued {
		if j.proof == p {
			return i
		}
	}
	return -1
}

// startQueued starts queued deliveries while fewer than Concurrency
// handlers run.
func (r *consumerRun) startQueued() {
	for !r.draining && len(r.queued) > 0 && len(r.running) < r.c.cfg.Concurrency {
		j := r.queued[0]
		r.queued[0] = nil
		r.queued = r.queued[1:]
		r.running[j.proof] = j
		r.handlers.Add(1)
		go func() {
			defer r.handlers.Done()
			j.err = r.call(j)
			r.finished <- j
		}()
	}
}

// call runs the handler, turning a panic into an error.
func (r *consumerRun) call(j *eventJob) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("orbit consumer: event handler panicked", slog.String("delivery_id", j.proof.DeliveryID),
				slog.String("event_id", j.d.Event.ID), slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
			err = errors.New("the event handler panicked")
		}
	}()
	return r.c.handler(j.ctx, j.d)
}

// handlerDone acknowledges the delivery of a handler that returned nil,
// and NACKs or rejects that of one that failed (K-15).
func (r *consumerRun) handlerDone(j *eventJob) {
	delete(r.running, j.proof)
	j.cancel()
	if j.err != nil {
		r.c.handlerErrors.Add(1)
		r.refuse(j)
	} else if cur := r.pending[j.proof.DeliveryID]; cur == nil || cur.proof.Epoch < j.proof.Epoch {
		p := &pendingAck{proof: j.proof, eventID: j.d.Event.ID}
		r.pending[j.proof.DeliveryID] = p
		r.sendAck(p)
	}
	r.startQueued()
}

// refuse tells the server that the handler of j failed: a reject for
// Reject, otherwise a NACK, with the delay of Retry or without one (the
// subscription's retry policy). It is sent once, on the current
// connection; without one, or if it is lost, the lease runs out and the
// server applies the retry policy all the same.
func (r *consumerRun) refuse(j *eventJob) {
	log := r.log.With(slog.String("delivery_id", j.proof.DeliveryID), slog.String("event_id", j.d.Event.ID),
		slog.Uint64("epoch", j.proof.Epoch), slog.String("error", j.err.Error()))
	var rej *RejectError
	reject := errors.As(j.err, &rej)
	var body any
	typ := frameEventNack
	switch {
	case reject:
		typ, body = frameEventReject, rejectBody{AckProof: j.proof, Reason: rejectReason(rej.Reason)}
		log.Warn("orbit consumer: handler rejected the event; rejecting the delivery, which will not be delivered again unless retried")
	default:
		nb := nackBody{AckProof: j.proof, Reason: ControlReason(j.err.Error())}
		var retry *RetryError
		if errors.As(j.err, &retry) {
			ms := retry.After.Milliseconds()
			nb.DelayMS = &ms
		}
		body = nb
		if j.d.AttemptBudget > 0 && j.d.Attempts >= j.d.AttemptBudget {
			log.Warn("orbit consumer: handler failed on the last attempt; the delivery becomes EXPIRED and is not delivered again unless retried",
				slog.Int("attempts", j.d.Attempts))
		} else {
			log.Warn("orbit consumer: handler failed; NACKing, the event will be delivered again later",
				slog.Int("attempts", j.d.Attempts), slog.Int("attempt_budget", j.d.AttemptBudget))
		}
	}
	conn := r.conn
	if conn == nil || r.draining {
		// During a shutdown a handler's failure is most likely its
		// cancelled context: its lease runs out instead.
		return
	}
	reply, err := conn.ec.send(typ, body, r.writeDeadline())
	if err != nil {
		r.lose(err)
		return
	}
	proof := j.proof
	r.goBackground(func() {
		ctx, cancel := context.WithTimeout(conn.ctx, r.c.replyTimeout)
		defer cancel()
		f, err := reply.wait(ctx)
		out := controlOutcome{proof: proof, reject: reject, err: err}
		if err == nil {
			out.res, out.err = decodeReply[ControlResult](f, typ)
		}
		post(r, r.controls, out)
	})
}

// controlled takes the answer to a NACK or a reject.
func (r *consumerRun) controlled(o controlOutcome) {
	log := r.log.With(slog.String("delivery_id", o.proof.DeliveryID), slog.Uint64("epoch", o.proof.Epoch))
	switch {
	case o.err == nil && o.reject:
		r.c.rejected.Add(1)
		log.Debug("orbit consumer: delivery rejected")
	case o.err == nil:
		r.c.nacked.Add(1)
		if o.res.State == "EXPIRED" {
			log.Warn("orbit consumer: no attempt remains; the delivery is EXPIRED and is not delivered again unless retried",
				slog.String("expired_reason", o.res.ExpiredReason))
		} else {
			log.Debug("orbit consumer: delivery NACKed", slog.Time("available_at", o.res.AvailableAt))
		}
	case IsCode(o.err, CodeDeliveryLeaseLost):
		r.c.leaseLost.Add(1)
		log.Info("orbit consumer: the NACK or reject found the lease already lost; the server decides what comes next")
	default:
		// The connection failed; its reader reports that. The lease runs
		// out and the retry policy applies.
		log.Debug("orbit consumer: NACK or reject not confirmed", slog.String("error", o.err.Error()))
	}
}

// leaseCheckInterval is how often the leases of running handlers are
// checked for extension: a tenth of the lease, within 10 ms and 1 s.
func leaseCheckInterval(lease time.Duration) time.Duration {
	return min(max(lease/10, 10*time.Millisecond), time.Second)
}

// checkLeases extends the lease of every running handler that has used
// two thirds of it, within MaxLeaseExtension, and cancels the context of
// one whose lease ran out after the maximum.
func (r *consumerRun) checkLeases() {
	conn := r.conn
	if conn == nil || r.draining {
		return
	}
	now := time.Now()
	for _, j := range r.running {
		if j.extending || j.leaseFor <= 0 {
			continue
		}
		left := r.c.cfg.MaxLeaseExtension - j.extended
		if left <= 0 || r.c.cfg.MaxLeaseExtension < 0 {
			if now.After(j.leaseUntil) {
				j.cancel()
			}
			continue
		}
		if now.Before(j.leaseUntil.Add(-j.leaseFor / 3)) {
			continue
		}
		by := min(j.leaseFor, left)
		reply, err := conn.ec.send(frameEventExtend, extendBody{AckProof: j.proof, ExtendMS: max(by.Milliseconds(), 1)}, r.writeDeadline())
		if err != nil {
			r.lose(err)
			return
		}
		j.extending = true
		proof := j.proof
		r.goBackground(func() {
			ctx, cancel := context.WithTimeout(conn.ctx, r.c.replyTimeout)
			defer cancel()
			_, err := reply.wait(ctx)
			post(r, r.extends, extendOutcome{conn: conn, proof: proof, by: by, sent: now, err: err})
		})
	}
}

// extendDone takes the answer to an extension: the lease now ends by
// from when it was asked; a refused one cancels the handler's context.
func (r *consumerRun) extendDone(o extendOutcome) {
	j := r.running[o.proof]
	if j == nil {
		return // the handler finished meanwhile
	}
	j.extending = false
	log := r.log.With(slog.String("delivery_id", o.proof.DeliveryID), slog.Uint64("epoch", o.proof.Epoch))
	switch {
	case o.err == nil:
		r.c.extended.Add(1)
		// The server counts from its receipt, after o.sent: counting
		// from o.sent errs on the safe side.
		if until := o.sent.Add(o.by); until.After(j.leaseUntil) {
			j.extended += until.Sub(j.leaseUntil)
			j.leaseUntil = until
		}
		log.Debug("orbit consumer: lease extended", slog.Duration("by", o.by))
	case IsCode(o.err, CodeDeliveryLeaseLost), IsCode(o.err, CodeInvalidArgument):
		r.c.leaseLost.Add(1)
		log.Warn("orbit consumer: lease extension refused; cancelling the handler, the event may be delivered again",
			slog.String("error", o.err.Error()))
		j.cancel()
	default:
		// The connection failed: the next check tries again on the next
		// connection, while the lease lasts.
		log.Debug("orbit consumer: lease extension not confirmed", slog.String("error", o.err.Error()))
	}
}

// sendAck writes the event.ack of p on the current connection, if any and
// if p does not already wait for an answer there, and waits for the answer
// in the background.
func (r *consumerRun) sendAck(p *pendingAck) {
	conn := r.conn
	if conn == nil || p.sentOn == conn {
		return
	}
	reply, err := conn.ec.send(frameEventAck, p.proof, r.writeDeadline())
	if err != nil {
		r.lose(err)
		return
	}
	p.sentOn = conn
	proof := p.proof
	r.goBackground(func() {
		ctx, cancel := context.WithTimeout(conn.ctx, r.c.replyTimeout)
		defer cancel()
		f, err := reply.wait(ctx)
		out := ackOutcome{conn: conn, proof: proof, err: err}
		if err == nil {
			out.res, out.err = decodeAck(f)
		}
		post(r, r.acks, out)
	})
}

// writeDeadline bounds a write: writeTimeout, and during a shutdown no
// later than the shutdown's end.
func (r *consumerRun) writeDeadline() time.Time {
	d := time.Now().Add(writeTimeout)
	if r.draining && r.deadline.Before(d) {
		d = r.deadline
	}
	return d
}

// acked takes the answer to an acknowledgement.
func (r *consumerRun) acked(a ackOutcome) error {
	p := r.pending[a.proof.DeliveryID]
	if p != nil && p.proof != a.proof {
		p = nil // answers a proof that a newer one replaced
	}
	log := r.log.With(slog.String("delivery_id", a.proof.DeliveryID), slog.Uint64("epoch", a.proof.Epoch))
	if p != nil {
		log = log.With(slog.String("event_id", p.eventID))
	}
	if a.err == nil {
		r.c.acked.Add(1)
		if a.res.Deduplicated {
			r.c.deduplicated.Add(1)
		}
		if p != nil {
			delete(r.pending, a.proof.DeliveryID)
		}
		r.settleAckIntent(a.proof)
		log.Debug("orbit consumer: delivery acknowledged", slog.Bool("deduplicated", a.res.Deduplicated))
		return nil
	}
	switch {
	case IsCode(a.err, CodeDeliveryLeaseLost):
		r.c.leaseLost.Add(1)
		if p != nil {
			delete(r.pending, a.proof.DeliveryID)
		}
		r.settleAckIntent(a.proof)
		log.Info("orbit consumer: acknowledgement refused, the lease was lost; the event is delivered again if attempts remain")
		return nil
	case IsCode(a.err, CodeInvalidArgument):
		if p != nil {
			delete(r.pending, a.proof.DeliveryID)
		}
		r.settleAckIntent(a.proof)
		log.Error("orbit consumer: acknowledgement refused", slog.String("error", a.err.Error()))
		return nil
	case sessionFatal(a.err):
		return a.err
	}
	// The connection failed or closes: send the proof again on the next.
	if p != nil && p.sentOn == a.conn {
		p.sentOn = nil
	}
	if a.conn == r.conn {
		r.lose(a.err)
	}
	return nil
}

// decodeAck decodes the ack that answers an event.ack, unless the reader
// decoded it already.
func decodeAck(f frame) (*AckResult, error) {
	if f.ack != nil {
		return f.ack, nil
	}
	var res AckResult
	if err := json.Unmarshal(f.Body, &res); err != nil {
		return nil, fmt.Errorf("orbit events: invalid ack: %w", err)
	}
	return &res, nil
}

// ping sends events.ping, unless the previous one still waits for its
// answer.
func (r *consumerRun) ping() {
	conn := r.conn
	if conn.pinging {
		return
	}
	reply, err := conn.ec.send(frameEventsPing, struct{}{}, r.writeDeadline())
	if err != nil {
		r.lose(err)
		return
	}
	conn.pinging = true
	r.goBackground(func() {
		ctx, cancel := context.WithTimeout(conn.ctx, r.c.replyTimeout)
		defer cancel()
		f, err := reply.wait(ctx)
		out := pingOutcome{conn: conn, err: err}
		if err == nil {
			var res PingResult
			if out.err = json.Unmarshal(f.Body, &res); out.err == nil {
				out.res = &res
			}
		}
		post(r, r.pings, out)
	})
}

// pinged takes the answer to a ping. A ping without an answer in time means
// the connection is gone.
func (r *consumerRun) pinged(p pingOutcome) error {
	if p.conn != r.conn {
		return nil
	}
	p.conn.pinging = false
	if p.err != nil {
		if sessionFatal(p.err) {
			return p.err
		}
		r.lose(p.err)
		return nil
	}
	if p.res.Enabled != p.conn.enabled {
		p.conn.enabled = p.res.Enabled
		r.log.Info("orbit consumer: subscription enabled changed", slog.Bool("enabled", p.res.Enabled))
	}
	return nil
}

// beginDrain stops handing out deliveries and cancels running handlers.
func (r *consumerRun) beginDrain() {
	r.draining = true
	r.deadline = time.Now().Add(r.c.cfg.ShutdownTimeout)
	r.log.Info("orbit consumer: shutting down", slog.Int("running", len(r.running)),
		slog.Int("not_started", len(r.queued)), slog.Int("unanswered_acks", len(r.pending)))
	for _, j := range r.queued {
		j.cancel()
	}
	r.queued = nil
	r.cancelHandlers()
}

// finish ends a shutdown: it closes the connection normally and waits for
// the handlers.
func (r *consumerRun) finish() {
	r.stopConnecting()
	if r.conn != nil {
		r.conn.cancel()
		r.conn.beat.Stop()
		r.conn.lease.Stop()
		_ = r.conn.ec.Close()
		r.conn = nil
	}
	r.handlers.Wait()
	r.log.Info("orbit consumer: stopped")
}

// abort ends Run after a non-retryable error.
func (r *consumerRun) abort(err error) {
	r.log.Error("orbit consumer: stopping", slog.String("error", err.Error()),
		slog.Int("running", len(r.running)), slog.Int("unanswered_acks", len(r.pending)))
	r.cancelHandlers()
	r.finish()
}

// stopConnecting abandons a connection attempt or a pending retry.
func (r *consumerRun) stopConnecting() {
	if r.retry != nil {
		r.retry.Stop()
		r.retry = nil
	}
	if r.connecting != nil {
		r.cancelConnect()
		if res := <-r.connecting; res.ec != nil {
			_ = res.ec.Close()
		}
		r.connecting, r.cancelConnect = nil, nil
	}
}
