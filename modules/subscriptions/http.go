package subscriptions

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/gorilla/mux"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/idem"
	"github.com/orbitrun/orbit/modules/tasks"
)

func (m *Module) routes(r *mux.Router) {
	a := m.auth
	r.Handle("/v1/subscriptions", auth.Require(a, auth.PermEventsManage, http.HandlerFunc(m.create))).Methods(http.MethodPost)
	r.Handle("/v1/subscriptions", auth.Require(a, auth.PermEventsRead, http.HandlerFunc(m.list))).Methods(http.MethodGet)
	r.Handle("/v1/subscriptions/{id}", auth.Require(a, auth.PermEventsRead, http.HandlerFunc(m.get))).Methods(http.MethodGet)
	r.Handle("/v1/subscriptions/{id}:configure", auth.Require(a, auth.PermEventsManage, http.HandlerFunc(m.configure))).Methods(http.MethodPost)
	r.Handle("/v1/subscriptions/{id}/deliveries", auth.Require(a, auth.PermEventsRead, http.HandlerFunc(m.listDeliveries))).Methods(http.MethodGet)
	r.Handle("/v1/subscriptions/{id}/deliveries/{delivery_id}", auth.Require(a, auth.PermEventsRead, http.HandlerFunc(m.getDelivery))).Methods(http.MethodGet)
	r.Handle("/v1/subscriptions/{id}/deliveries/{delivery_id}:retry", auth.Require(a, auth.PermEventsManage, http.HandlerFunc(m.retry))).Methods(http.MethodPost)
	r.Handle("/v1/subscriptions/{id}/deliveries:retry", auth.Require(a, auth.PermEventsManage, http.HandlerFunc(m.retryBulk))).Methods(http.MethodPost)
	r.Handle("/v1/subscriptions/{id}:replay", auth.Require(a, auth.PermEventsManage, http.HandlerFunc(m.replay))).Methods(http.MethodPost)
	r.Handle("/v1/subscriptions/{id}:skip", auth.Require(a, auth.PermEventsManage, http.HandlerFunc(m.skip))).Methods(http.MethodPost)
	r.Handle("/v1/subscriptions/{id}", auth.Require(a, auth.PermEventsManage, http.HandlerFunc(m.remove))).Methods(http.MethodDelete)
}

// checkChange checks the required fields of an audited change, then its
// reason (one of fields).
func checkChange(reason *string, fields ...httpx.Field) error {
	if err := httpx.Required(fields...); err != nil {
		return err
	}
	return checkReason(*reason)
}

// loadOwnedChange checks an audited change to the subscription named in
// the path (checkChange), then loads it as loadOwned does.
func (m *Module) loadOwnedChange(r *http.Request, reason *string, fields ...httpx.Field) (*Subscription, error) {
	if err := checkChange(reason, fields...); err != nil {
		return nil, err
	}
	return m.loadOwned(r)
}

func checkReason(reason string) error {
	if n := utf8.RuneCountInString(reason); n == 0 || n > maxReasonChars {
		return httpx.Errorf(httpx.CodeInvalidArgument, "reason must be 1 to %d characters", maxReasonChars)
	}
	return nil
}

type createRequest struct {
	Name         *string       `json:"name"`
	QueueID      *string       `json:"queue_id"`
	Types        []string      `json:"types"`
	FromSequence *httpx.Uint64 `json:"from_sequence"`
	MaxPending   *int          `json:"max_pending"`
	MaxAttempts  *int          `json:"max_attempts"`
	// RetryPolicy is optional; omitted means DefaultRetryPolicy (K-4).
	RetryPolicy *retryPolicyRequest `json:"retry_policy"`
}

type subscriptionReceipt struct {
	Subscription subscriptionView `json:"subscription"`
}

func (m *Module) create(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	idem.Write(w, r, m.db, &req, func(p *auth.Principal) (idem.Change, error) {
		params, err := req.params(p)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, tx *sql.Tx) (int, any, error) {
			s, err := subscriptionCreate(ctx, tx, m.log, params)
			if err != nil {
				return 0, nil, err
			}
			v, err := m.view(ctx, tx, s)
			if err != nil {
				return 0, nil, err
			}
			return http.StatusCreated, subscriptionReceipt{Subscription: v}, nil
		}, nil
	})
	m.wake.Notify()
}

// params checks a create request (S-4, S-5, S-11) and binds it to the
// caller's credential (S-1).
func (req *createRequest) params(p *auth.Principal) (*subscriptionCreateParams, error) {
	if err := httpx.Required(
		httpx.Field{Path: "name", Present: req.Name != nil},
		httpx.Field{Path: "queue_id", Present: req.QueueID != nil},
	); err != nil {
		return nil, err
	}
	if !httpx.ValidName(*req.Name, 128) {
		return nil, httpx.Errorf(httpx.CodeInvalidArgument, "name must be 1-128 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit")
	}
	if !httpx.ValidID(*req.QueueID) {
		return nil, httpx.Errorf(httpx.CodeInvalidArgument, "queue_id must be 32 lowercase hex characters")
	}
	types, err := normalizeTypes(req.Types)
	if err != nil {
		return nil, err
	}
	maxPending := defaultMaxPending
	if req.MaxPending != nil && *req.MaxPending != 0 {
		if *req.MaxPending < 1 || *req.MaxPending > maxMaxPending {
			return nil, httpx.Errorf(httpx.CodeInvalidArgument, "max_pending must be 0 (default %d) or 1 to %d", defaultMaxPending, maxMaxPending)
		}
		maxPending = *req.MaxPending
	}
	maxAttempts := defaultMaxAttempts
	if req.MaxAttempts != nil && *req.MaxAttempts != 0 {
		if *req.MaxAttempts < 1 || *req.MaxAttempts > maxMaxAttempts {
			return nil, httpx.Errorf(httpx.CodeInvalidArgument, "max_attempts must be 0 (default %d) or 1 to %d", defaultMaxAttempts, maxMaxAttempts)
		}
		maxAttempts = *req.MaxAttempts
	}
	policy := DefaultRetryPolicy
	if req.RetryPolicy != nil {
		if policy, err = req.RetryPolicy.policy(); err != nil {
			return nil, err
		}
	}
	if !p.HasQueue(*req.QueueID) {
		return nil, auth.ErrNotFound("queue")
	}
	params := &subscriptionCreateParams{
		NamespaceID: p.NamespaceID, QueueID: *req.QueueID, CredentialID: p.CredentialID, Name: *req.Name,
		Types: types, MaxPending: maxPending, MaxAttempts: maxAttempts, RetryPolicy: policy,
	}
	if req.FromSequence != nil {
		from := uint64(*req.FromSequence)
		params.FromSequence = &from
	}
	return params, nil
}

// view returns the wire form of s with its progress, read in q.
func (m *Module) view(ctx context.Context, q Querier, s *Subscription) (subscriptionView, error) {
	stats, err := subscriptionStats(ctx, q, m.log, []*Subscription{s}, db.Now(), m.cfg.NoConsumerAfter)
	if err != nil {
		return subscriptionView{}, err
	}
	return s.view(stats[s.ID]), nil
}

// loadOwned returns the subscription named in the path if the caller owns
// it and holds a grant on its queue; otherwise 404 whether or not it exists
// (S-1, C-3).
func (m *Module) loadOwned(r *http.Request) (*Subscription, error) {
	id := mux.Vars(r)["id"]
	if !httpx.ValidID(id) {
		return nil, httpx.Errorf(httpx.CodeInvalidArgument, "subscription id must be 32 lowercase hex characters")
	}
	s, err := subscriptionGet(r.Context(), m.db, id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, auth.ErrNotFound("subscription")
	}
	if err != nil {
		return nil, err
	}
	p := auth.FromContext(r.Context())
	if s.CredentialID != p.CredentialID || s.NamespaceID != p.NamespaceID || !p.HasQueue(s.QueueID) {
		return nil, auth.ErrNotFound("subscription")
	}
	return s, nil
}

func (m *Module) get(w http.ResponseWriter, r *http.Request) {
	httpx.Read(w, r, nil, func(map[string]string) (subscriptionView, error) {
		s, err := m.loadOwned(r)
		if err != nil {
			return subscriptionView{}, err
		}
		return m.view(r.Context(), m.db, s)
	})
}

func (m *Module) list(w http.ResponseWriter, r *http.Request) {
	httpx.Read(w, r, []string{"queue_id", "limit", "cursor"}, func(q map[string]string) (page httpx.Page[subscriptionView], err error) {
		queueID, ok := q["queue_id"]
		if !ok {
			return page, httpx.Errorf(httpx.CodeInvalidArgument, "query parameter queue_id is required")
		}
		if !httpx.ValidID(queueID) {
			return page, httpx.Errorf(httpx.CodeInvalidArgument, "queue_id must be 32 lowercase hex characters")
		}
		limit, err := httpx.Limit(q)
		if err != nil {
			return page, err
		}
		p := auth.FromContext(r.Context())
		if !p.HasQueue(queueID) {
			return page, auth.ErrNotFound("queue")
		}
		binding := "subscriptions|" + p.CredentialID + "|" + p.NamespaceID + "|queue=" + queueID
		after, err := httpx.CursorParam(q, binding)
		if err != nil {
			return page, err
		}
		rows, err := subscriptionList(r.Context(), m.db, &subscriptionListParams{QueueID: queueID, CredentialID: p.CredentialID, ListPage: httpx.ListPage{Limit: limit, After: after}})
		if err != nil {
			return page, err
		}
		stats, err := subscriptionStats(r.Context(), m.db, m.log, rows, db.Now(), m.cfg.NoConsumerAfter)
		if err != nil {
			return page, err
		}
		return httpx.NewPage(rows, limit, binding,
			func(s *Subscription) (time.Time, string) { return s.CreatedAt, s.ID },
			func(s *Subscription) subscriptionView { return s.view(stats[s.ID]) }), nil
	})
}

type configureRequest struct {
	ExpectedRevision *httpx.Uint64 `json:"expected_revision"`
	Enabled          *bool         `json:"enabled"`
	Reason           *string       `json:"reason"`
	// RetryPolicy is optional; omitted keeps the current policy (K-4).
	RetryPolicy *retryPolicyRequest `json:"retry_policy"`
}

func (m *Module) configure(w http.ResponseWriter, r *http.Request) {
	var req configureRequest
	idem.Write(w, r, m.db, &req, func(p *auth.Principal) (idem.Change, error) {
		if err := checkChange(req.Reason,
			httpx.Field{Path: "expected_revision", Present: req.ExpectedRevision != nil},
			httpx.Field{Path: "enabled", Present: req.Enabled != nil},
			httpx.Field{Path: "reason", Present: req.Reason != nil},
		); err != nil {
			return nil, err
		}
		var policy *RetryPolicy
		if req.RetryPolicy != nil {
			rp, err := req.RetryPolicy.policy()
			if err != nil {
				return nil, err
			}
			policy = &rp
		}
		s, err := m.loadOwned(r)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, tx *sql.Tx) (int, any, error) {
			after, err := subscriptionConfigure(ctx, tx, m.audit, &subscriptionConfigureParams{
				ID: s.ID, CredentialID: p.CredentialID, ExpectedRevision: uint64(*req.ExpectedRevision),
				Enabled: *req.Enabled, RetryPolicy: policy, Reason: *req.Reason,
			})
			if err != nil {
				return 0, nil, err
			}
			v, err := m.view(ctx, tx, after)
			if err != nil {
				return 0, nil, err
			}
			return http.StatusOK, subscriptionReceipt{Subscription: v}, nil
		}, nil
	})
	// A resumed subscription's PENDING deliveries are claimable at once,
	// on every node (the cluster module relays claimable), and its backlog
	// may take more of the log.
	m.wake.Notify()
	m.claimable.NotifyAll()
}

func (m *Module) listDeliveries(w http.ResponseWriter, r *http.Request) {
	if _, ok := r.URL.Query()["older_than_ms"]; ok {
		m.listStuckDeliveries(w, r)
		return
	}
	httpx.Read(w, r, []string{"limit", "cursor", "state", "expired_reason"}, func(q map[string]string) (page httpx.Page[DeliveryView], err error) {
		state, limit, s, err := m.deliveryListArgs(r, q)
		if err != nil {
			return page, err
		}
		reason, filtered := q["expired_reason"]
		switch {
		case !filtered:
		case state != stateExpired:
			return page, httpx.Errorf(httpx.CodeInvalidArgument, "expired_reason filters EXPIRED deliveries only: add state=EXPIRED")
		default:
			if err := checkExpiredReason("expired_reason", reason); err != nil {
				return page, err
			}
		}
		p := auth.FromContext(r.Context())
		binding := "deliveries|" + s.ID + "|" + p.CredentialID + "|" + p.NamespaceID + "|state=" + state
		if filtered {
			binding += "|expired_reason=" + reason
		}
		after, err := httpx.CursorParam(q, binding)
		if err != nil {
			return page, err
		}
		rows, err := deliveryList(r.Context(), m.db, &deliveryListParams{
			SubscriptionID: s.ID, State: state, ExpiredReason: reason, ListPage: httpx.ListPage{Limit: limit, After: after},
		})
		if err != nil {
			return page, err
		}
		return httpx.NewPage(rows, limit, binding,
			func(d *Delivery) (time.Time, string) { return d.CreatedAt, d.ID },
			func(d *Delivery) DeliveryView { return d.View() }), nil
	})
}

// listStuckDeliveries is the list of deliveries with older_than_ms: the
// stuck-work report (K-14).
func (m *Module) listStuckDeliveries(w http.ResponseWriter, r *http.Request) {
	httpx.Read(w, r, []string{"limit", "cursor", "state", "older_than_ms"}, func(q map[string]string) (page httpx.Page[StuckDeliveryView], err error) {
		older, _, err := httpx.OlderThan(q, stateLeased)
		if err != nil {
			return page, err
		}
		_, limit, s, err := m.deliveryListArgs(r, q)
		if err != nil {
			return page, err
		}
		return m.listStuck(r, q, s, limit, db.Now().Add(-older))
	})
}

// deliveryListArgs checks the state and limit of a delivery list and loads
// the caller's subscription.
func (m *Module) deliveryListArgs(r *http.Request, q map[string]string) (string, int, *Subscription, error) {
	state := q["state"]
	switch state {
	case "", statePending, stateLeased, StateAcked, stateExpired:
	default:
		return "", 0, nil, httpx.Errorf(httpx.CodeInvalidArgument, "state must be PENDING, LEASED, ACKED or EXPIRED")
	}
	limit, err := httpx.Limit(q)
	if err != nil {
		return "", 0, nil, err
	}
	s, err := m.loadOwned(r)
	if err != nil {
		return "", 0, nil, err
	}
	return state, limit, s, nil
}

type deliveryDetail struct {
	Delivery DeliveryView `json:"delivery"`
	Event    tasks.Event  `json:"event"`
}

// loadDelivery returns the delivery named in the path within the caller's
// subscription; a delivery of another subscription is 404 (S-19).
func (m *Module) loadDelivery(r *http.Request, s *Subscription) (*Delivery, error) {
	id := mux.Vars(r)["delivery_id"]
	if !httpx.ValidID(id) {
		return nil, httpx.Errorf(httpx.CodeInvalidArgument, "delivery id must be 32 lowercase hex characters")
	}
	d, err := deliveryGet(r.Context(), m.db, s.ID, id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, auth.ErrNotFound("delivery")
	}
	return d, err
}

func (m *Module) getDelivery(w http.ResponseWriter, r *http.Request) {
	httpx.Read(w, r, nil, func(map[string]string) (detail deliveryDetail, err error) {
		s, err := m.loadOwned(r)
		if err != nil {
			return detail, err
		}
		d, err := m.loadDelivery(r, s)
		if err != nil {
			return detail, err
		}
		ev, err := m.log.EventGet(r.Context(), m.db, s.QueueID, d.EventID)
		if errors.Is(err, sql.ErrNoRows) {
			// Retention purges the events of acknowledged deliveries.
			err = httpx.Errorf(httpx.CodeEventHistoryExpired, "the event of this delivery was purged by retention")
		}
		if err != nil {
			return detail, err
		}
		return deliveryDetail{Delivery: d.View(), Event: ev}, nil
	})
}

type retryRequest struct {
	ExpectedRevision   *httpx.Uint64 `json:"expected_revision"`
	Reason             *string       `json:"reason"`
	AdditionalAttempts *int          `json:"additional_attempts"`
}

type deliveryReceipt struct {
	Delivery DeliveryView `json:"delivery"`
}

func (m *Module) retry(w http.ResponseWriter, r *http.Request) {
	var req retryRequest
	var subscriptionID string
	idem.Write(w, r, m.db, &req, func(p *auth.Principal) (idem.Change, error) {
		if err := checkChange(req.Reason,
			httpx.Field{Path: "expected_revision", Present: req.ExpectedRevision != nil},
			httpx.Field{Path: "reason", Present: req.Reason != nil},
			httpx.Field{Path: "additional_attempts", Present: req.AdditionalAttempts != nil},
		); err != nil {
			return nil, err
		}
		if n := *req.AdditionalAttempts; n < 1 || n > maxAdditionalAttempts {
			return nil, httpx.Errorf(httpx.CodeInvalidArgument, "additional_attempts must be 1 to %d", maxAdditionalAttempts)
		}
		s, err := m.loadOwned(r)
		if err != nil {
			return nil, err
		}
		d, err := m.loadDelivery(r, s)
		if err != nil {
			return nil, err
		}
		subscriptionID = s.ID
		return func(ctx context.Context, tx *sql.Tx) (int, any, error) {
			after, err := deliveryRetry(ctx, tx, &deliveryRetryParams{
				SubscriptionID: s.ID, ID: d.ID, CredentialID: p.CredentialID,
				ExpectedRevision: uint64(*req.ExpectedRevision), AdditionalAttempts: *req.AdditionalAttempts, Reason: *req.Reason,
			})
			if err != nil {
				return 0, nil, err
			}
			return http.StatusOK, deliveryReceipt{Delivery: after.View()}, nil
		}, nil
	})
	if subscriptionID != "" {
		m.madePending(subscriptionID)
	}
}
