package subscriptions

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/gorilla/mux"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/idem"
)

// The recovery endpoints (K-7 … K-11, K-14).

type retryBulkFilter struct {
	State         *string       `json:"state"`
	ExpiredReason *string       `json:"expired_reason"`
	FromSequence  *httpx.Uint64 `json:"from_sequence"`
	ToSequence    *httpx.Uint64 `json:"to_sequence"`
}

type retryBulkRequest struct {
	Filter             *retryBulkFilter `json:"filter"`
	AdditionalAttempts *int             `json:"additional_attempts"`
	Reason             *string          `json:"reason"`
	DryRun             *bool            `json:"dry_run"`
	ExpectedCount      *int             `json:"expected_count"`
}

type replayRequest struct {
	FromSequence  *httpx.Uint64 `json:"from_sequence"`
	ToSequence    *httpx.Uint64 `json:"to_sequence"`
	Reason        *string       `json:"reason"`
	DryRun        *bool         `json:"dry_run"`
	ExpectedCount *int          `json:"expected_count"`
}

type operationReceipt struct {
	Operation Operation `json:"operation"`
}

// checkRange checks an optional sequence range.
func checkRange(from, to *httpx.Uint64, fromName, toName string) error {
	if from != nil && to != nil && *from > *to {
		return httpx.Errorf(httpx.CodeInvalidArgument, "%s must not be after %s", fromName, toName)
	}
	return nil
}

// guard checks the dry_run / expected_count pair of a bulk operation and
// returns whether it is a dry run.
func guard(dryRun *bool, expected *int) (bool, error) {
	if dryRun != nil && *dryRun {
		return true, nil
	}
	if expected == nil {
		return false, httpx.Errorf(httpx.CodeInvalidArgument, "expected_count is required unless dry_run is true; count with a dry run first")
	}
	if *expected < 0 || *expected > maxBulk {
		return false, httpx.Errorf(httpx.CodeInvalidArgument, "expected_count must be 0 to %d", maxBulk)
	}
	return false, nil
}

// bulk serves a guarded bulk operation (K-7, K-8) whose body was read
// into raw and checked: a dry run counts what f matches and changes
// nothing (no Idempotency-Key needed); a real run performs change once per
// Idempotency-Key (idem.Handle), and wakes the event connections.
func (m *Module) bulk(w http.ResponseWriter, r *http.Request, raw []byte, dryRun bool, f *deliveryFilter, before func(ctx context.Context, q Querier) error, change func(ctx context.Context, tx *sql.Tx) (Operation, error)) {
	p := auth.FromContext(r.Context())
	if dryRun {
		if before != nil {
			if err := before(r.Context(), m.db); err != nil {
				httpx.WriteError(w, r, err)
				return
			}
		}
		res, err := deliveryCount(r.Context(), m.db, f)
		if err != nil {
			httpx.WriteError(w, r, err)
			return
		}
		httpx.WriteData(w, r, http.StatusOK, res)
		return
	}
	idem.Handle(w, r, m.db, p.CredentialID, raw, func(ctx context.Context, tx *sql.Tx) (int, any, error) {
		op, err := change(ctx, tx)
		if errors.Is(err, sql.ErrNoRows) {
			err = auth.ErrNotFound("subscription")
		}
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, operationReceipt{Operation: op}, nil
	})
	m.madePending(f.SubscriptionID)
}

// retryBulk is POST /v1/subscriptions/{id}/deliveries:retry (K-7).
func (m *Module) retryBulk(w http.ResponseWriter, r *http.Request) {
	var req retryBulkRequest
	raw, err := httpx.ReadJSON(r, &req)
	if err == nil {
		err = httpx.Required(
			httpx.Field{Path: "filter", Present: req.Filter != nil},
			httpx.Field{Path: "additional_attempts", Present: req.AdditionalAttempts != nil},
			httpx.Field{Path: "reason", Present: req.Reason != nil},
		)
	}
	if err == nil {
		err = httpx.Required(httpx.Field{Path: "filter.state", Present: req.Filter.State != nil})
	}
	if err == nil && *req.Filter.State != stateExpired {
		err = httpx.Errorf(httpx.CodeInvalidArgument, "filter.state must be EXPIRED: only dead letters are retried")
	}
	if err == nil && req.Filter.ExpiredReason != nil {
		err = checkExpiredReason("filter.expired_reason", *req.Filter.ExpiredReason)
	}
	if err == nil {
		err = checkRange(req.Filter.FromSequence, req.Filter.ToSequence, "filter.from_sequence", "filter.to_sequence")
	}
	if err == nil {
		err = checkReason(*req.Reason)
	}
	if err == nil {
		if n := *req.AdditionalAttempts; n < 1 || n > maxAdditionalAttempts {
			err = httpx.Errorf(httpx.CodeInvalidArgument, "additional_attempts must be 1 to %d", maxAdditionalAttempts)
		}
	}
	dryRun := false
	if err == nil {
		dryRun, err = guard(req.DryRun, req.ExpectedCount)
	}
	var s *Subscription
	if err == nil {
		s, err = m.loadOwned(r)
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	f := &deliveryFilter{SubscriptionID: s.ID, State: stateExpired}
	if req.Filter.ExpiredReason != nil {
		f.ExpiredReason = *req.Filter.ExpiredReason
	}
	f.From, f.To = (*uint64)(req.Filter.FromSequence), (*uint64)(req.Filter.ToSequence)
	p := auth.FromContext(r.Context())
	m.bulk(w, r, raw, dryRun, f, nil, func(ctx context.Context, tx *sql.Tx) (Operation, error) {
		return deliveryRetryBulk(ctx, tx, &deliveryRetryBulkParams{
			Filter: *f, CredentialID: p.CredentialID, ExpectedCount: *req.ExpectedCount,
			AdditionalAttempts: *req.AdditionalAttempts, Reason: *req.Reason,
		})
	})
}

// replay is POST /v1/subscriptions/{id}:replay (K-8).
func (m *Module) replay(w http.ResponseWriter, r *http.Request) {
	var req replayRequest
	raw, err := httpx.ReadJSON(r, &req)
	if err == nil {
		err = httpx.Required(
			httpx.Field{Path: "from_sequence", Present: req.FromSequence != nil},
			httpx.Field{Path: "to_sequence", Present: req.ToSequence != nil},
			httpx.Field{Path: "reason", Present: req.Reason != nil},
		)
	}
	if err == nil {
		err = checkRange(req.FromSequence, req.ToSequence, "from_sequence", "to_sequence")
	}
	if err == nil {
		err = checkReason(*req.Reason)
	}
	dryRun := false
	if err == nil {
		dryRun, err = guard(req.DryRun, req.ExpectedCount)
	}
	var s *Subscription
	if err == nil {
		s, err = m.loadOwned(r)
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	from, to := uint64(*req.FromSequence), uint64(*req.ToSequence)
	f := &deliveryFilter{SubscriptionID: s.ID, State: StateAcked, From: &from, To: &to}
	p := auth.FromContext(r.Context())
	m.bulk(w, r, raw, dryRun, f, func(ctx context.Context, q Querier) error {
		return checkReplayRange(ctx, q, m.log, s, from, to)
	}, func(ctx context.Context, tx *sql.Tx) (Operation, error) {
		return deliveryReplay(ctx, tx, m.log, &deliveryReplayParams{
			Filter: *f, CredentialID: p.CredentialID, ExpectedCount: *req.ExpectedCount, Reason: *req.Reason,
		})
	})
}

// skipTarget is to_sequence of a skip: a canonical decimal string, or
// "head" for the queue's committed head at the time of the skip.
type skipTarget struct {
	head bool
	seq  uint64
}

// UnmarshalJSON decodes "head" or a canonical decimal string.
func (t *skipTarget) UnmarshalJSON(b []byte) error {
	if jsontext.Value(b).Kind() == '"' {
		if s, err := jsontext.AppendUnquote(nil, b); err == nil && string(s) == "head" {
			t.head = true
			return nil
		}
	}
	var n httpx.Uint64
	if err := n.UnmarshalJSON(b); err != nil {
		return &httpx.Error{Code: httpx.CodeInvalidArgument, Message: `must be "head" or a canonical decimal string`}
	}
	t.seq = uint64(n)
	return nil
}

type skipRequest struct {
	ToSequence       *skipTarget   `json:"to_sequence"`
	ExpectedRevision *httpx.Uint64 `json:"expected_revision"`
	Reason           *string       `json:"reason"`
}

type skipReceipt struct {
	Subscription subscriptionView `json:"subscription"`
	Operation    Operation        `json:"operation"`
}

// skip is POST /v1/subscriptions/{id}:skip (K-9).
func (m *Module) skip(w http.ResponseWriter, r *http.Request) {
	var req skipRequest
	idem.Write(w, r, m.db, &req, func(p *auth.Principal) (idem.Change, error) {
		s, err := m.loadOwnedChange(r, req.Reason,
			httpx.Field{Path: "to_sequence", Present: req.ToSequence != nil},
			httpx.Field{Path: "expected_revision", Present: req.ExpectedRevision != nil},
			httpx.Field{Path: "reason", Present: req.Reason != nil},
		)
		if err != nil {
			return nil, err
		}
		params := &subscriptionSkipParams{ID: s.ID, CredentialID: p.CredentialID, ExpectedRevision: uint64(*req.ExpectedRevision), Reason: *req.Reason}
		if !req.ToSequence.head {
			params.To = &req.ToSequence.seq
		}
		return func(ctx context.Context, tx *sql.Tx) (int, any, error) {
			after, op, err := subscriptionSkip(ctx, tx, m.log, params)
			if errors.Is(err, sql.ErrNoRows) {
				err = auth.ErrNotFound("subscription")
			}
			if err != nil {
				return 0, nil, err
			}
			v, err := m.view(ctx, tx, after)
			if err != nil {
				return 0, nil, err
			}
			return http.StatusOK, skipReceipt{Subscription: v, Operation: op}, nil
		}, nil
	})
	m.wake.Notify()
}

type deleteRequest struct {
	ExpectedRevision *httpx.Uint64 `json:"expected_revision"`
	Reason           *string       `json:"reason"`
}

type deletionReceipt struct {
	Deletion Deletion `json:"deletion"`
}

// remove is DELETE /v1/subscriptions/{id} (K-11). A replay of the
// deletion's key returns its receipt although the subscription is gone;
// any other request on a deleted subscription is 404.
func (m *Module) remove(w http.ResponseWriter, r *http.Request) {
	var req deleteRequest
	idem.Write(w, r, m.db, &req, func(p *auth.Principal) (idem.Change, error) {
		s, err := m.loadOwnedChange(r, req.Reason,
			httpx.Field{Path: "expected_revision", Present: req.ExpectedRevision != nil},
			httpx.Field{Path: "reason", Present: req.Reason != nil},
		)
		if err != nil {
			var he *httpx.Error
			if !errors.As(err, &he) || he.Code != httpx.CodeNotFound {
				return nil, err
			}
			// Deleted by the caller: the key's record, if it is this
			// deletion's, answers before the change would run.
			deleted, derr := subscriptionDeletedBy(r.Context(), m.db, mux.Vars(r)["id"], p.NamespaceID, p.CredentialID)
			if derr != nil || !deleted {
				return nil, err
			}
			return func(context.Context, *sql.Tx) (int, any, error) { return 0, nil, err }, nil
		}
		return func(ctx context.Context, tx *sql.Tx) (int, any, error) {
			d, err := subscriptionDelete(ctx, tx, &subscriptionDeleteParams{
				ID: s.ID, CredentialID: p.CredentialID, ExpectedRevision: uint64(*req.ExpectedRevision), Reason: *req.Reason,
			})
			if errors.Is(err, sql.ErrNoRows) {
				err = auth.ErrNotFound("subscription")
			}
			if err != nil {
				return 0, nil, err
			}
			return http.StatusOK, deletionReceipt{Deletion: d}, nil
		}, nil
	})
	// Connections learn of it at their next claim, woken at once.
	m.claimable.Drop(mux.Vars(r)["id"])
	m.claimable.NotifyAll()
	m.purge.Notify()
}

// StuckDeliveryView is a LEASED delivery in the stuck-work report (K-14):
// the delivery with the event connection holding it and when its lease
// began.
type StuckDeliveryView struct {
	DeliveryView
	LeaseSessionID string `json:"lease_session_id"`
	LeasedAt       string `json:"leased_at"`
}

// listStuck is GET …/deliveries?state=LEASED&older_than_ms=N (K-14).
func (m *Module) listStuck(r *http.Request, q map[string]string, s *Subscription, limit int, cutoff time.Time) (page httpx.Page[StuckDeliveryView], err error) {
	p := auth.FromContext(r.Context())
	binding := "deliveries|" + s.ID + "|" + p.CredentialID + "|" + p.NamespaceID + "|state=" + stateLeased + "|older_than_ms=" + q["older_than_ms"]
	after, err := httpx.CursorParam(q, binding)
	if err != nil {
		return page, err
	}
	rows, err := deliveryListStuck(r.Context(), m.db, s.ID, cutoff, httpx.ListPage{Limit: limit, After: after})
	if err != nil {
		return page, err
	}
	return httpx.NewPage(rows, limit, binding,
		func(d *stuckDelivery) (time.Time, string) { return d.CreatedAt, d.ID },
		func(d *stuckDelivery) StuckDeliveryView {
			return StuckDeliveryView{DeliveryView: d.View(), LeaseSessionID: d.LeaseSession, LeasedAt: httpx.FormatTime(d.LeasedAt)}
		}), nil
}

// stuckDelivery is a LEASED delivery with the start of its lease.
type stuckDelivery struct {
	*Delivery
	LeasedAt time.Time
}

// deliveryListStuck returns up to page.Limit+1 LEASED deliveries of a
// subscription whose lease began at or before cutoff, newest first. LEASED
// deliveries are only as many as the connected consumers' capacities.
func deliveryListStuck(ctx context.Context, q Querier, subscriptionID string, cutoff time.Time, page httpx.ListPage) ([]*stuckDelivery, error) {
	scan := func(row scanner) (*stuckDelivery, error) {
		var d stuckDelivery
		var leasedAt sql.NullTime
		inner, err := scanDelivery(rowWithExtra{row, &leasedAt})
		if err != nil {
			return nil, err
		}
		d.Delivery, d.LeasedAt = inner, leasedAt.Time
		return &d, nil
	}
	rows, err := httpx.ListRows(ctx, q, scan, `SELECT `+deliveryColumns+`, leased_at FROM event_deliveries
		WHERE subscription_id = ? AND leased_at <= ?`, []any{subscriptionID, cutoff}, "", stateLeased, page)
	if err != nil {
		return nil, fmt.Errorf("subscriptions: list stuck deliveries: %w", err)
	}
	return rows, nil
}

// rowWithExtra scans a row of deliveryColumns followed by one more column
// into extra.
type rowWithExtra struct {
	row   scanner
	extra any
}

// Scan scans the delivery's columns into dest and the last into extra.
func (r rowWithExtra) Scan(dest ...any) error { return r.row.Scan(append(dest, r.extra)...) }
