package tasks

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/batch"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/idem"
)

// Submissions (POST /v1/tasks) arriving together on a node are recorded in
// shared transactions (group commit): while one batch commits, those
// arriving meanwhile queue up and go together in the next, their tasks in
// one INSERT and their idempotency records in another. Each submission is
// still idempotent on its own key and answered only after the commit that
// recorded it, with what it would have been answered alone.
const (
	// submitFlushers bounds the submit transactions running at once on a
	// node: two, so that one batch gathers while the other commits.
	submitFlushers = 2
	// maxSubmitBatch bounds the submissions of one batch.
	maxSubmitBatch = 128
	// maxSubmitBytes bounds the task inputs one transaction writes (a
	// batch with more is recorded in several), far below the smallest
	// max_allowed_packet of a supported server.
	maxSubmitBytes = 4 << 20
	// submitTimeout bounds a submission whose context has no deadline
	// (requests have C-12's).
	submitTimeout = 8 * time.Second
)

// pendingSubmit is one submission waiting for its batch: its write and
// the deadline of its request, which bounds the transaction recording it.
type pendingSubmit struct {
	item     idem.ScopedItem
	deadline time.Time
	// recheck is the grant of a caller answered from the node's recent
	// authentications (auth.Principal.Cached), checked before the write;
	// nil when the caller was authenticated afresh.
	recheck *auth.Grant
	done    chan submitAnswer
}

type submitAnswer struct {
	receipt idem.ItemReceipt
	err     error
}

// newSubmitBatcher returns the node's batcher of submissions.
func (m *Module) newSubmitBatcher() *batch.Batcher[*pendingSubmit] {
	return batch.New(submitFlushers, maxSubmitBatch, m.recordSubmits)
}

// submitTogether records one submission with those arriving with it and
// returns its receipt once they are committed. The transaction that
// records it is bounded by ctx's deadline, as it was when each submission
// had a transaction of its own (C-12): one that runs out rolls back, and
// its submissions are answered UNAVAILABLE with nothing changed. A client
// that goes away does not cancel it.
func (m *Module) submitTogether(ctx context.Context, item idem.ScopedItem, recheck *auth.Grant) (idem.ItemReceipt, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(submitTimeout)
	}
	p := &pendingSubmit{item: item, deadline: deadline, recheck: recheck, done: make(chan submitAnswer, 1)}
	m.submits.Submit(p)
	a := <-p.done
	if a.err == nil {
		a.err = a.receipt.Err
	}
	return a.receipt, a.err
}

// recordSubmits records a batch of submissions, one transaction per round
// (submitKeys.take says what a round takes), each ending by the earliest
// deadline of its submissions. Each submission gets its round's outcome; those whose
// callers came from the node's recent authentications have their grants
// checked first (recheckSubmits).
func (m *Module) recordSubmits(requests []*pendingSubmit) {
	requests = m.recheckSubmits(requests)
	for len(requests) > 0 {
		round, rest := m.submitKeys.take(requests)
		deadline := round[0].deadline
		writes := make([]idem.ScopedItem, len(round))
		for i, r := range round {
			writes[i] = r.item
			if r.deadline.Before(deadline) {
				deadline = r.deadline
			}
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		receipts, err := idem.DoScoped(ctx, m.store.pool(), writes, insertStagedTasks)
		cancel()
		m.submitKeys.release(round)
		for i, r := range round {
			a := submitAnswer{err: err}
			if err == nil {
				a.receipt = receipts[i]
			}
			r.done <- a
		}
		requests = rest
	}
}

// submitKey is what an idempotency key is unique within, with the key.
type submitKey struct{ credentialID, operation, key string }

func keyOf(r *pendingSubmit) submitKey {
	return submitKey{r.item.CredentialID, r.item.Operation, r.item.Key}
}

// submitKeys are the idempotency keys of the submit rounds being recorded
// on a node. A round never takes a key that another round holds: two
// transactions recording one key at once both find no record, and the
// later one's insert fails on the earlier one's, which idem.DoScoped
// retries only a few times before answering UNAVAILABLE. Rounds on other
// nodes can still race; the retries are for them.
type submitKeys struct {
	mu    sync.Mutex
	freed sync.Cond
	held  map[submitKey]bool
}

func newSubmitKeys() *submitKeys {
	k := &submitKeys{held: map[submitKey]bool{}}
	k.freed.L = &k.mu
	return k
}

// take picks the next round of requests and holds its keys: each key once
// (a repeat goes in a later round, where it finds the first's record), no
// key another round holds, and at most maxSubmitBytes of input. It returns
// the round and the requests left for later ones; when every request's key
// is held by another round, it waits for that round to end. A round holds
// its keys only while it runs, and take waits holding none, so rounds never
// wait for each other in a circle.
func (k *submitKeys) take(requests []*pendingSubmit) (round, rest []*pendingSubmit) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for {
		size := 0
		round, rest = nil, nil
		for _, r := range requests {
			// A key this round took is held too: its repeats wait.
			key := keyOf(r)
			if k.held[key] || (len(round) > 0 && size+len(r.item.Body) > maxSubmitBytes) {
				rest = append(rest, r)
				continue
			}
			k.held[key] = true
			size += len(r.item.Body)
			round = append(round, r)
		}
		if len(round) > 0 {
			return round, rest
		}
		k.freed.Wait()
	}
}

// release lets other rounds take the keys of round.
func (k *submitKeys) release(round []*pendingSubmit) {
	k.mu.Lock()
	for _, r := range round {
		delete(k.held, keyOf(r))
	}
	k.mu.Unlock()
	k.freed.Broadcast()
}

// recheckSubmits checks, with one statement for the whole batch, the
// grants of the submissions whose callers were answered from the node's
// recent authentications, which a revocation or a removed grant may have
// outdated. It answers those refused with the grant's error, as a fresh
// authentication would have (401, 403 or 404), and returns the others.
// The check reads after every submission of the batch arrived, so a change
// committed before a submission arrived refuses it, as when each request
// read its credential itself.
func (m *Module) recheckSubmits(requests []*pendingSubmit) []*pendingSubmit {
	var grants []auth.Grant
	var deadline time.Time
	for _, r := range requests {
		if r.recheck != nil {
			grants = append(grants, *r.recheck)
			if deadline.IsZero() || r.deadline.Before(deadline) {
				deadline = r.deadline
			}
		}
	}
	if len(grants) == 0 {
		return requests
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	denied, err := m.store.grants.CheckGrants(ctx, m.store.pool(), grants)
	cancel()
	kept := requests[:0:0]
	i := 0
	for _, r := range requests {
		if r.recheck == nil {
			kept = append(kept, r)
			continue
		}
		switch {
		case err != nil:
			r.done <- submitAnswer{err: fmt.Errorf("tasks: check grants: %w", err)}
		case denied[i] != nil:
			r.done <- submitAnswer{err: denied[i]}
		default:
			kept = append(kept, r)
		}
		i++
	}
	return kept
}

// stageTask is the change of one submission: its task is staged in tx, to
// be inserted with the others of the transaction (insertStagedTasks), and
// committed is called with it after the commit.
func (m *Module) stageTask(params *TaskInsertParams, committed func(*Task)) idem.Change {
	return func(ctx context.Context, tx *sql.Tx) (int, any, error) {
		t := newTask(params, db.Now())
		staged := stagedTasks(tx)
		*staged = append(*staged, t)
		db.OnCommit(tx, func() {
			m.store.metrics.submittedTask(t)
			committed(t)
		})
		return http.StatusCreated, taskReceipt{Task: t.view(false)}, nil
	}
}

// stagedTasks returns the tasks the submissions of transaction tx staged in
// this attempt of it, to be inserted together after the last one.
func stagedTasks(tx *sql.Tx) *[]*Task {
	return db.TxValue(tx, stagedTasksKey{}, func() *[]*Task { return new([]*Task) })
}

type stagedTasksKey struct{}

// insertStagedTasks inserts the tasks staged in tx.
func insertStagedTasks(ctx context.Context, tx *sql.Tx) error {
	return tasksInsert(ctx, tx, *stagedTasks(tx))
}
