// Package inbox applies Orbit result events exactly once to the receiver's
// own MySQL database (seed 000 §4).
//
// Apply records each event in receiver_inbox, keyed by (consumer name, queue,
// event id), and advances the task's row in receiver_task_views in the same
// READ COMMITTED transaction. Only when that transaction has committed does
// Apply return nil, so the SDK acknowledges only what is durably applied. A
// repeat of the same event finds the committed Inbox record and changes
// nothing; an older task version is recorded without advancing the view.
package inbox

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Errors of Apply. Apply never returns nil unless the event is durably
// recorded; every error means "do not acknowledge".
var (
	// ErrCommitUnconfirmed means the connection was lost while COMMIT was
	// in flight: the transaction may or may not have committed. The event
	// must not be acknowledged; its redelivery is decided by the Inbox
	// (committed: duplicate; not committed: applied afresh).
	ErrCommitUnconfirmed = errors.New("inbox: commit outcome unknown")
	// ErrConflict means the Inbox already holds this event id with other
	// content, or the view holds another event for the same task version.
	// Nothing is overwritten or acknowledged; the original is kept.
	ErrConflict = errors.New("inbox: conflicting event")
	// ErrWrongQueue means the event comes from a queue other than the one
	// this Store receives.
	ErrWrongQueue = errors.New("inbox: event from another queue")
)

// DefaultTxTimeout bounds one business transaction (seed 000 §3).
const DefaultTxTimeout = 5 * time.Second

var consumerName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidConsumerName reports whether name is a valid RECEIVER_NAME: at most 64
// ASCII characters, a letter or digit first, then letters, digits, '.', '_'
// or '-'.
func ValidConsumerName(name string) bool { return consumerName.MatchString(name) }

// Store applies events of one queue for one receiving purpose.
type Store struct {
	db        *sql.DB
	consumer  string
	queueID   string
	txTimeout time.Duration
}

// NewStore returns a Store. consumer is the fixed receiving purpose
// (RECEIVER_NAME): restarts, scale-out and several instances share it.
func NewStore(db *sql.DB, consumer, queueID string) (*Store, error) {
	if !ValidConsumerName(consumer) {
		return nil, fmt.Errorf("inbox: consumer name %q: at most 64 ASCII characters, a letter or digit first, then letters, digits, '.', '_', '-'", consumer)
	}
	if !validID(queueID) {
		return nil, fmt.Errorf("inbox: queue id must be 32 lowercase hex characters")
	}
	return &Store{db: db, consumer: consumer, queueID: queueID, txTimeout: DefaultTxTimeout}, nil
}

// Result says what Apply did.
type Result struct {
	// Duplicate is true when the event was already in the Inbox, committed
	// by an earlier call (this one changed nothing).
	Duplicate bool
	// Applied reports whether the transaction that first recorded the event
	// advanced the task view; it does not mean this call applied it again.
	Applied bool
}

// Event is the part of a result event Apply checks and uses.
type Event struct {
	ID                string          `json:"id"`
	Sequence          string          `json:"sequence"`
	Type              string          `json:"type"`
	AggregateKind     string          `json:"aggregate_kind"`
	AggregateID       string          `json:"aggregate_id"`
	AggregateRevision string          `json:"aggregate_revision"`
	OccurredAt        string          `json:"occurred_at"`
	Details           json.RawMessage `json:"details"`
	Snapshot          struct {
		SchemaVersion    int             `json:"schema_version"`
		TaskID           string          `json:"task_id"`
		QueueID          string          `json:"queue_id"`
		State            string          `json:"state"`
		Revision         string          `json:"revision"`
		EffectUncertain  bool            `json:"effect_uncertain"`
		Result           json.RawMessage `json:"result"`
		CurrentAttemptID string          `json:"current_attempt_id"`
	} `json:"snapshot"`
}

// stateOfType is the snapshot state each result type must carry.
var stateOfType = map[string]string{
	"task.succeeded":    "SUCCEEDED",
	"task.failed":       "FAILED",
	"task.cancelled":    "CANCELLED",
	"task.needs_review": "NEEDS_REVIEW",
}

// Parse checks and canonicalises an event's JSON and returns the event, its
// canonical form and the canonical form's SHA-256 (hex). It checks, in this
// order: size, JSON validity, duplicate keys, Unicode, then that the event
// is a result of queueID whose type, task, revision and state agree.
func Parse(raw []byte, queueID string) (*Event, []byte, string, error) {
	canonical, err := Canonicalize(raw)
	if err != nil {
		return nil, nil, "", err
	}
	// Fields are read from the event as received, so the result keeps its
	// original JSON text; the canonical form is what is frozen and hashed.
	var ev Event
	dec := json.NewDecoder(bytesReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&ev); err != nil {
		return nil, nil, "", fmt.Errorf("%w: %v", ErrInvalidEvent, err)
	}
	s := &ev.Snapshot
	switch {
	case s.QueueID != queueID:
		return nil, nil, "", ErrWrongQueue
	case !validID(ev.ID) || !validID(ev.AggregateID) || !validID(s.TaskID):
		return nil, nil, "", fmt.Errorf("%w: ids must be 32 lowercase hex characters", ErrInvalidEvent)
	case ev.AggregateKind != "task" || ev.AggregateID != s.TaskID:
		return nil, nil, "", fmt.Errorf("%w: aggregate is not the snapshot's task", ErrInvalidEvent)
	case s.SchemaVersion != 1:
		return nil, nil, "", fmt.Errorf("%w: unknown snapshot schema_version %d", ErrInvalidEvent, s.SchemaVersion)
	case stateOfType[ev.Type] == "":
		return nil, nil, "", fmt.Errorf("%w: %q is not a result type", ErrInvalidEvent, ev.Type)
	case stateOfType[ev.Type] != s.State:
		return nil, nil, "", fmt.Errorf("%w: type %s with snapshot state %s", ErrInvalidEvent, ev.Type, s.State)
	case ev.AggregateRevision != s.Revision:
		return nil, nil, "", fmt.Errorf("%w: aggregate_revision differs from the snapshot's revision", ErrInvalidEvent)
	}
	if _, err := parseRevision(s.Revision); err != nil {
		return nil, nil, "", err
	}
	sum := sha256.Sum256(canonical)
	return &ev, canonical, hex.EncodeToString(sum[:]), nil
}

// Apply records the event and advances the task view, exactly once per
// (consumer, queue, event id) (R-11 … R-16). It returns nil only after the
// transaction has committed.
func (s *Store) Apply(ctx context.Context, raw []byte) (Result, error) {
	return s.apply(ctx, raw, nil)
}

// ApplyWithIntent is Apply that also records intent, the ACK proof of the
// delivery that brought the event, in the same transaction as the Inbox
// record and the view (K-13): when the transaction commits, the ACK is
// owed and survives the process. A duplicate records no intent, since it
// commits nothing. The caller acknowledges the delivery and then clears
// the intent with AckIntentClear.
func (s *Store) ApplyWithIntent(ctx context.Context, raw []byte, intent AckIntent) (Result, error) {
	return s.apply(ctx, raw, &intent)
}

func (s *Store) apply(ctx context.Context, raw []byte, intent *AckIntent) (Result, error) {
	ev, canonical, digest, err := Parse(raw, s.queueID)
	if err != nil {
		return Result{}, err
	}
	if intent != nil {
		if err := intent.check(); err != nil {
			return Result{}, err
		}
	}
	revision, _ := parseRevision(ev.Snapshot.Revision)
	ctx, cancel := context.WithTimeout(ctx, s.txTimeout)
	defer cancel()

	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return Result{}, fmt.Errorf("inbox: begin: %w", err)
	}
	applied, err := s.applyInTx(ctx, tx, ev, canonical, digest, revision)
	if err == nil && intent != nil {
		err = s.ackIntentRecord(ctx, tx, ev.ID, intent)
	}
	if err != nil {
		tx.Rollback()
		if isDuplicateKey(err) {
			return s.duplicate(ctx, ev.ID, digest)
		}
		return Result{}, err
	}
	if err := tx.Commit(); err != nil {
		if commitOutcomeUnknown(err) {
			return Result{}, fmt.Errorf("%w: %v", ErrCommitUnconfirmed, err)
		}
		return Result{}, fmt.Errorf("inbox: commit: %w", err)
	}
	return Result{Applied: applied}, nil
}

// applyInTx inserts the Inbox record and advances the view. A duplicate
// Inbox key is returned as the driver's 1062 error; a competing insert of
// the same key waits here for the other transaction's commit or rollback.
func (s *Store) applyInTx(ctx context.Context, tx *sql.Tx, ev *Event, canonical []byte, digest string, revision uint64) (bool, error) {
	now := time.Now().UTC().Truncate(time.Microsecond)
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO receiver_inbox (consumer_name, queue_id, event_id, event_sha256, event_json, applied, received_at)
		VALUES (?, ?, ?, ?, ?, 0, ?)`, s.consumer, s.queueID, ev.ID, digest, string(canonical), now); err != nil {
		return false, err
	}
	// Create the view row if absent (placeholder version 0, replaced below
	// before commit) and lock it.
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO receiver_task_views (consumer_name, queue_id, task_id, task_revision, last_event_id, last_state,
			last_result, applied_events, created_at, updated_at)
		VALUES (?, ?, ?, 0, '', '', NULL, 0, ?, ?)
		ON DUPLICATE KEY UPDATE task_id = task_id`, s.consumer, s.queueID, ev.AggregateID, now, now); err != nil {
		return false, fmt.Errorf("inbox: create view: %w", err)
	}
	var (
		current   uint64
		lastEvent string
	)
	if err := tx.QueryRowContext(ctx, `
		SELECT task_revision, last_event_id FROM receiver_task_views
		WHERE consumer_name = ? AND queue_id = ? AND task_id = ? FOR UPDATE`, s.consumer, s.queueID, ev.AggregateID).
		Scan(&current, &lastEvent); err != nil {
		return false, fmt.Errorf("inbox: lock view: %w", err)
	}
	switch {
	case revision < current:
		// An older version: kept in the Inbox, never overwrites the view.
		return false, nil
	case revision == current:
		// Same task version under another event id: refuse everything.
		return false, fmt.Errorf("%w: task %s version %d was already applied from event %s", ErrConflict, ev.AggregateID, revision, lastEvent)
	}
	var result any
	if len(ev.Snapshot.Result) > 0 && string(ev.Snapshot.Result) != "null" {
		result = string(ev.Snapshot.Result)
	}
	if _, err := tx.ExecContext(ctx, `
		UPDATE receiver_task_views SET task_revision = ?, last_event_id = ?, last_state = ?, last_result = ?,
			applied_events = applied_events + 1, updated_at = ?
		WHERE consumer_name = ? AND queue_id = ? AND task_id = ?`,
		revision, ev.ID, ev.Snapshot.State, result, now, s.consumer, s.queueID, ev.AggregateID); err != nil {
		return false, fmt.Errorf("inbox: advance view: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `
		UPDATE receiver_inbox SET applied = 1 WHERE consumer_name = ? AND queue_id = ? AND event_id = ?`,
		s.consumer, s.queueID, ev.ID); err != nil {
		return false, fmt.Errorf("inbox: mark applied: %w", err)
	}
	return true, nil
}

// duplicate reads the committed Inbox record of an event another
// transaction recorded and compares digests.
func (s *Store) duplicate(ctx context.Context, eventID, digest string) (Result, error) {
	var (
		stored  string
		applied bool
	)
	err := s.db.QueryRowContext(ctx, `SELECT event_sha256, applied FROM receiver_inbox
		WHERE consumer_name = ? AND queue_id = ? AND event_id = ?`, s.consumer, s.queueID, eventID).Scan(&stored, &applied)
	if err != nil {
		return Result{}, fmt.Errorf("inbox: read committed record: %w", err)
	}
	if stored != digest {
		return Result{}, fmt.Errorf("%w: event %s is already recorded with other content", ErrConflict, eventID)
	}
	return Result{Duplicate: true, Applied: applied}, nil
}

// View is a row of receiver_task_views.
type View struct {
	TaskID        string
	TaskRevision  uint64
	LastEventID   string
	LastState     string
	LastResult    *string
	AppliedEvents int
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// View returns the task's view row, or sql.ErrNoRows.
func (s *Store) View(ctx context.Context, taskID string) (*View, error) {
	var v View
	var result sql.NullString
	err := s.db.QueryRowContext(ctx, `SELECT task_id, task_revision, last_event_id, last_state, last_result, applied_events, created_at, updated_at
		FROM receiver_task_views WHERE consumer_name = ? AND queue_id = ? AND task_id = ?`, s.consumer, s.queueID, taskID).
		Scan(&v.TaskID, &v.TaskRevision, &v.LastEventID, &v.LastState, &result, &v.AppliedEvents, &v.CreatedAt, &v.UpdatedAt)
	if err != nil {
		return nil, err
	}
	if result.Valid {
		v.LastResult = &result.String
	}
	return &v, nil
}

func parseRevision(s string) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || s == "" || (len(s) > 1 && s[0] == '0') || n == 0 {
		return 0, fmt.Errorf("%w: revision %q is not a canonical positive decimal", ErrInvalidEvent, s)
	}
	return n, nil
}

func validID(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func isDuplicateKey(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1062
}

// commitOutcomeUnknown reports whether a COMMIT error leaves the outcome
// unknown: the connection broke (or the context ended) while the COMMIT was
// in flight, rather than the server answering with an error.
func commitOutcomeUnknown(err error) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return false
	}
	var ne net.Error
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, context.Canceled) || errors.As(err, &ne) || errors.Is(err, sql.ErrTxDone)
}
