package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
	"github.com/orbitrun/orbit/modules/tasks"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func TestProcess(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, input, want string
	}{
		{"ASCII", `{"text":"hello orbit"}`, `{"length":11,"upper":"HELLO ORBIT"}`},
		{"CountsCharactersNotBytes", `{"text":"héllo"}`, `{"length":5,"upper":"HÉLLO"}`},
		{"EmptyText", `{"text":""}`, `{"length":0,"upper":""}`},
		{"OtherMembersIgnored", `{"text":"a","lang":"en"}`, `{"length":1,"upper":"A"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := process(json.RawMessage(c.input))
			if err != nil || string(got) != c.want {
				t.Fatalf("process(%s) = %s, %v; want %s", c.input, got, err, c.want)
			}
		})
	}
	for _, c := range []struct{ name, input string }{
		{"NoText", `{}`}, {"NullText", `{"text":null}`}, {"NumberText", `{"text":5}`},
		{"NotAnObject", `"text"`}, {"Null", `null`}, {"Array", `[]`},
	} {
		t.Run("BadInput"+c.name, func(t *testing.T) {
			t.Parallel()
			if got, err := process(json.RawMessage(c.input)); !errors.Is(err, errBadInput) {
				t.Fatalf("process(%s) = %s, %v; want errBadInput", c.input, got, err)
			}
		})
	}
}

// syncBuffer is the worker's output, written by its handlers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestRunCompletesTasksEndToEnd runs the example's main loop against a real
// server, submits a task with a text and one without, and checks the tasks'
// results, the lines printed, and a clean stop.
func TestRunCompletesTasksEndToEnd(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	cred := srv.Credential(t, servertest.CredentialParams{
		Permissions: []string{auth.PermTasksSubmit, auth.PermTasksRead, auth.PermTasksWork},
	})
	creds := &orbit.Credentials{URL: srv.URL, Token: cred.Token, QueueID: cred.QueueID}
	var out, logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, creds, &out, slog.New(slog.NewTextHandler(&logs, nil))) }()

	client, err := creds.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	submit := func(key, input string) string {
		res, err := client.SubmitTask(ctx, key, orbit.SubmitTaskRequest{QueueID: cred.QueueID, Input: json.RawMessage(input)})
		if err != nil {
			t.Fatal(err)
		}
		return res.Task.ID
	}
	good := submit("good", `{"text":"secret words"}`)
	bad := submit("bad", `{"words":"secret words"}`)

	// Each task ends with one result-log event; the tasks module wakes us
	// after every append.
	appended := srv.Instances["tasks"].(*tasks.Module)
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		woken := appended.Appended()
		s, err := tasks.StreamGet(ctx, srv.DB, cred.QueueID)
		if err != nil {
			t.Fatal(err)
		}
		if s.Head >= 2 {
			break
		}
		select {
		case <-woken:
		case <-deadline.C:
			t.Fatalf("the tasks did not finish; worker output:\n%s\nlog:\n%s", out.String(), logs.String())
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}

	task, err := client.GetTask(context.Background(), good)
	if err != nil {
		t.Fatal(err)
	}
	if task.State != orbit.TaskStateSucceeded || string(task.Result) != `{"length":12,"upper":"SECRET WORDS"}` {
		t.Errorf("task with a text: %s with result %s", task.State, task.Result)
	}
	task, err = client.GetTask(context.Background(), bad)
	if err != nil {
		t.Fatal(err)
	}
	if task.State != orbit.TaskStateFailed || task.Error == nil || task.Error.Code != codeBadInput {
		t.Errorf("task without a text: %s with error %+v, want FAILED with %s", task.State, task.Error, codeBadInput)
	}

	printed := out.String()
	for _, line := range []string{"task " + good + " succeeded\n", "task " + bad + " failed BAD_INPUT\n", "stopped\n"} {
		if !strings.Contains(printed, line) {
			t.Errorf("output lacks %q:\n%s", line, printed)
		}
	}
	for _, secret := range []string{cred.Token, "secret", "SECRET"} {
		if strings.Contains(printed, secret) || strings.Contains(logs.String(), secret) {
			t.Errorf("output or log contains %q:\n%s\n%s", secret, printed, logs.String())
		}
	}
}

// TestLoadCredentials checks where the example finds its credentials. It
// sets environment variables, so it does not run in parallel.
func TestLoadCredentials(t *testing.T) {
	for _, name := range []string{orbit.EnvCredentialsFile, orbit.EnvURL, orbit.EnvToken, orbit.EnvQueueID} {
		t.Setenv(name, "")
	}
	t.Run("DefaultsToTheDevFile", func(t *testing.T) {
		_, err := loadCredentials()
		if err == nil || !strings.Contains(err.Error(), defaultCredentialsFile) {
			t.Fatalf("loadCredentials() error = %v; want one naming %s", err, defaultCredentialsFile)
		}
	})
	t.Run("FileFromTheEnvironment", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "creds.json")
		body := `{"url":"http://127.0.0.1:1","token":"tok","queue_id":"0123456789abcdef0123456789abcdef"}`
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv(orbit.EnvCredentialsFile, path)
		c, err := loadCredentials()
		if err != nil || c.Token != "tok" || c.QueueID != "0123456789abcdef0123456789abcdef" {
			t.Fatalf("loadCredentials() = %v, %v", c, err)
		}
	})
	t.Run("EnvironmentAlone", func(t *testing.T) {
		t.Setenv(orbit.EnvURL, "http://127.0.0.1:1")
		t.Setenv(orbit.EnvToken, "tok")
		c, err := loadCredentials()
		if err != nil || c.Token != "tok" || c.URL != "http://127.0.0.1:1" {
			t.Fatalf("loadCredentials() = %v, %v", c, err)
		}
	})
}

func TestRunNeedsAQueue(t *testing.T) {
	t.Parallel()
	err := run(context.Background(), &orbit.Credentials{URL: "http://127.0.0.1:1", Token: "tok"}, &syncBuffer{}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), orbit.EnvQueueID) {
		t.Fatalf("run without a queue: %v", err)
	}
}
