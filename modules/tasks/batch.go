package tasks

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
	"go.opentelemetry.io/otel/trace"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/httpx"
	"github.com/orbitrun/orbit/internal/idem"
	"github.com/orbitrun/orbit/internal/tracing"
)

// MaxBatchTasks is the largest number of tasks one POST /v1/tasks:batch
// submits (T-batch).
const MaxBatchTasks = 500

// submitOperation is the idempotency operation of a task submission: a
// batch item's key is scoped as the Idempotency-Key of POST /v1/tasks.
const submitOperation = http.MethodPost + " /v1/tasks"

type batchRequest struct {
	Tasks []jsontext.Value `json:"tasks"`
}

// batchItem is one task of a batch: a submit body with its own key.
type batchItem struct {
	IdempotencyKey *string        `json:"idempotency_key"`
	QueueID        *string        `json:"queue_id"`
	Input          jsontext.Value `json:"input"`
	Idempotent     *bool          `json:"idempotent"`
	MaxAttempts    *int           `json:"max_attempts"`
}

// batchResult answers one item: what POST /v1/tasks with the item's key
// and body would have answered, its status and its data or error.
type batchResult struct {
	IdempotencyKey string          `json:"idempotency_key"`
	Status         int             `json:"status"`
	Data           json.RawMessage `json:"data,omitempty"`
	Error          *batchError     `json:"error,omitempty"`
}

type batchError struct {
	Code    httpx.Code `json:"code"`
	Message string     `json:"message"`
}

type batchReply struct {
	Results []batchResult `json:"results"`
}

// submitBatch answers POST /v1/tasks:batch (T-batch): up to MaxBatchTasks
// submissions in one transaction, each idempotent on its own key and
// judged on its own.
func (m *Module) submitBatch(w http.ResponseWriter, r *http.Request) {
	ctx, span, traceCtx := m.tracer.Start(r.Context(), spanSubmit, trace.SpanKindServer, tracing.FromHeader(r.Header))
	defer span.End()
	var req batchRequest
	if _, err := httpx.ReadJSON(r, &req); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	if req.Tasks == nil {
		httpx.WriteError(w, r, httpx.Errorf(httpx.CodeInvalidArgument, "tasks is required"))
		return
	}
	if len(req.Tasks) == 0 || len(req.Tasks) > MaxBatchTasks {
		httpx.WriteError(w, r, httpx.Errorf(httpx.CodeInvalidArgument, "tasks must hold 1 to %d tasks", MaxBatchTasks))
		return
	}
	p := auth.FromContext(r.Context())
	results := make([]batchResult, len(req.Tasks))
	var items []idem.Item
	var itemIndex []int
	seen := make(map[string]bool, len(req.Tasks))
	var (
		mu     sync.Mutex
		queues []string // of the tasks created
	)
	for i, raw := range req.Tasks {
		var it batchItem
		if err := httpx.DecodeJSONBytes(raw, &it); err != nil {
			httpx.WriteError(w, r, httpx.Errorf(httpx.CodeInvalidArgument, "tasks.%d: %s", i, message(err)))
			return
		}
		if it.IdempotencyKey == nil || !httpx.ValidIdempotencyKey(*it.IdempotencyKey) {
			httpx.WriteError(w, r, httpx.Errorf(httpx.CodeInvalidArgument,
				"tasks.%d.idempotency_key is required: 1 to 128 characters of A-Z a-z 0-9 . _ - :", i))
			return
		}
		key := *it.IdempotencyKey
		if seen[key] {
			httpx.WriteError(w, r, httpx.Errorf(httpx.CodeInvalidArgument, "tasks.%d.idempotency_key repeats an earlier item's key", i))
			return
		}
		seen[key] = true
		results[i].IdempotencyKey = key
		sub := submitRequest{QueueID: it.QueueID, Input: it.Input, Idempotent: it.Idempotent, MaxAttempts: it.MaxAttempts}
		params, err := sub.check(p)
		if err != nil {
			results[i].setError(err)
			continue
		}
		params.Trace = traceCtx
		body, err := itemBody(raw)
		if err != nil {
			httpx.WriteError(w, r, err)
			return
		}
		items = append(items, idem.Item{Key: key, Body: body, Change: m.stageTask(params, func(t *Task) {
			mu.Lock()
			defer mu.Unlock()
			queues = append(queues, t.QueueID)
		})})
		itemIndex = append(itemIndex, i)
	}
	// The new tasks are written together, after every item was judged.
	receipts, err := idem.DoItems(ctx, m.store.pool(), p.CredentialID, submitOperation, items, insertStagedTasks)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	for k, rc := range receipts {
		res := &results[itemIndex[k]]
		if rc.Err != nil {
			res.setError(rc.Err)
			continue
		}
		res.Status, res.Data = rc.Status, rc.Data
	}
	if len(queues) > 0 {
		m.store.submitted.Notify(queues...)
	}
	httpx.WriteData(w, r, http.StatusOK, batchReply{Results: results})
}

// setError records an item's error with the status it would have had on
// its own.
func (b *batchResult) setError(err error) {
	var he *httpx.Error
	if !errors.As(err, &he) {
		he = httpx.Errorf(httpx.CodeInvalidArgument, "%s", err.Error())
	}
	b.Status = he.Code.Status()
	b.Error = &batchError{Code: he.Code, Message: he.Message}
}

// message is the message of a decoding error, without its code.
func message(err error) string {
	var he *httpx.Error
	if errors.As(err, &he) {
		return he.Message
	}
	return err.Error()
}

// itemBody is the item without its idempotency_key: the body a single
// POST /v1/tasks of the same task would have, so that the two digest
// alike.
func itemBody(raw jsontext.Value) ([]byte, error) {
	var members map[string]jsontext.Value
	if err := httpx.DecodeJSONBytes(raw, &members); err != nil {
		return nil, err
	}
	delete(members, "idempotency_key")
	var buf bytes.Buffer
	buf.WriteByte('{')
	first := true
	for k, v := range members {
		if !first {
			buf.WriteByte(',')
		}
		first = false
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		buf.Write(kb)
		buf.WriteByte(':')
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}
