package sdk_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	orbit "github.com/orbitrun/orbit/sdk/go"
)

// The SDK's task methods against the real server: submit with replay,
// get with the input's exact text, list with paging and a state filter,
// cancel with replay and conflict, and the credential's own description.
func TestTasks_SubmitGetListCancel(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()

	info, err := f.client.Credential(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != f.cred.CredentialID || !slices.Equal(info.QueueIDs, []string{f.queueID}) || len(info.Permissions) != len(allPermissions) {
		t.Errorf("credential = %+v", info)
	}

	input := json.RawMessage(`{"order":"A-17","amount":12345678901234567890123}`)
	submit := orbit.SubmitTaskRequest{QueueID: f.queueID, Input: input, Idempotent: true, MaxAttempts: 5}
	first, err := f.client.SubmitTask(ctx, "submit:1", submit)
	if err != nil {
		t.Fatal(err)
	}
	task := first.Task
	if first.Deduplicated || task.State != orbit.TaskStatePending || task.QueueID != f.queueID || !task.Idempotent ||
		task.MaxAttempts != 5 || task.Revision == 0 || task.CreatedAt.IsZero() {
		t.Errorf("submit = %+v", first)
	}
	replay, err := f.client.SubmitTask(ctx, "submit:1", submit)
	if err != nil {
		t.Fatal(err)
	}
	if !replay.Deduplicated || replay.Task.ID != task.ID {
		t.Errorf("replay = %+v; want the original receipt", replay)
	}
	submit.MaxAttempts = 6
	if _, err := f.client.SubmitTask(ctx, "submit:1", submit); apiCode(t, err) != orbit.CodeIdempotencyConflict {
		t.Errorf("same key, other request: %v; want IDEMPOTENCY_CONFLICT", err)
	}

	got, err := f.client.GetTask(ctx, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != task.ID || string(got.Input) != string(input) {
		t.Errorf("get = %+v; input %s, want %s", got, got.Input, input)
	}
	if _, err := f.client.GetTask(ctx, "0123456789abcdef0123456789abcdef"); apiCode(t, err) != orbit.CodeNotFound {
		t.Errorf("unknown task: %v; want NOT_FOUND", err)
	}

	for i := range 2 {
		if _, err := f.client.SubmitTask(ctx, fmt.Sprintf("submit:more:%d", i), orbit.SubmitTaskRequest{QueueID: f.queueID, Input: json.RawMessage(`1`)}); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	req := orbit.ListTasksRequest{QueueID: f.queueID, State: orbit.TaskStatePending, Limit: 2}
	for {
		page, err := f.client.ListTasks(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Items {
			ids = append(ids, it.ID)
			if it.Input != nil {
				t.Errorf("list item %s carries its input", it.ID)
			}
		}
		if page.NextCursor == "" {
			break
		}
		req.Cursor = page.NextCursor
	}
	if len(ids) != 3 || ids[2] != task.ID {
		t.Errorf("listed %v; want three tasks, the first submitted last", ids)
	}

	cancel := orbit.CancelTaskRequest{Reason: "no longer needed"}
	cancelled, err := f.client.CancelTask(ctx, task.ID, "cancel:1", cancel)
	if err != nil {
		t.Fatal(err)
	}
	if cancelled.Deduplicated || cancelled.Task.State != orbit.TaskStateCancelled || cancelled.Task.Revision <= task.Revision ||
		cancelled.Task.FinishedAt.IsZero() {
		t.Errorf("cancel = %+v", cancelled)
	}
	again, err := f.client.CancelTask(ctx, task.ID, "cancel:1", cancel)
	if err != nil || !again.Deduplicated || again.Task.Revision != cancelled.Task.Revision {
		t.Errorf("cancel replay = %+v %v; want the original receipt", again, err)
	}
	if _, err := f.client.CancelTask(ctx, task.ID, "cancel:2", cancel); apiCode(t, err) != orbit.CodeStateConflict {
		t.Errorf("cancel of a CANCELLED task: %v; want STATE_CONFLICT", err)
	}
	done, err := f.client.ListTasks(ctx, orbit.ListTasksRequest{QueueID: f.queueID, State: orbit.TaskStateCancelled})
	if err != nil || len(done.Items) != 1 || done.Items[0].ID != task.ID {
		t.Errorf("CANCELLED tasks: %+v %v", done, err)
	}
}
