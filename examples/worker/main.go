// Command worker is a small Orbit worker built on the Go SDK. It works on the
// tasks of one queue: for the input {"text": "..."} it reports the result
// {"length": N, "upper": "..."}, where N counts the text's characters; any
// other input fails with the error code BAD_INPUT. It prints one line per
// task, with the task's ID and outcome (never the token, the input or the
// result), and stops cleanly on Ctrl-C: tasks it has not started go back to
// the queue, and the ones it has started are finished and reported.
//
// It reads its credentials as orbit.LoadCredentialsFromEnv does: from the
// file named by ORBIT_CREDENTIALS_FILE, or from ORBIT_URL, ORBIT_TOKEN and
// ORBIT_QUEUE_ID. When neither ORBIT_CREDENTIALS_FILE nor ORBIT_TOKEN is set,
// it reads .local/dev.credentials.json, the file `make run` writes.
//
// See README.md for how to run it against `make run`.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"unicode/utf8"

	orbit "github.com/orbitrun/orbit/sdk/go"
)

const (
	// defaultCredentialsFile is where `make run` writes its dev credentials,
	// relative to the repository root.
	defaultCredentialsFile = ".local/dev.credentials.json"
	// capacity is how many tasks the worker runs at once.
	capacity = 4
	// codeBadInput is the error code of a task whose input has no text.
	codeBadInput = "BAD_INPUT"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// After the first Ctrl-C the worker drains; a second one ends it at once.
	context.AfterFunc(ctx, stop)
	creds, err := loadCredentials()
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, creds, os.Stdout, logger); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// loadCredentials reads the credentials as orbit.LoadCredentialsFromEnv
// does, with defaultCredentialsFile as the file when neither
// ORBIT_CREDENTIALS_FILE nor ORBIT_TOKEN is set.
func loadCredentials() (*orbit.Credentials, error) {
	if os.Getenv(orbit.EnvCredentialsFile) == "" && os.Getenv(orbit.EnvToken) == "" {
		return orbit.LoadCredentials(defaultCredentialsFile)
	}
	return orbit.LoadCredentialsFromEnv()
}

// run works on the tasks of creds.QueueID, writing one line per task to out,
// until ctx is cancelled; it then lets the worker drain and returns nil. It
// returns an error when the server refuses the credentials or the queue.
func run(ctx context.Context, creds *orbit.Credentials, out io.Writer, logger *slog.Logger) error {
	if creds.QueueID == "" {
		return fmt.Errorf("the credentials name no queue: set queue_id in the file or %s", orbit.EnvQueueID)
	}
	p := &printer{w: out}
	w, err := orbit.NewWorker(orbit.WorkerConfig{
		BaseURL: creds.URL, Token: creds.Token, QueueID: creds.QueueID,
		Capacity: capacity, WorkerName: "example-worker", Logger: logger,
	}, func(_ context.Context, t *orbit.AssignedTask) orbit.Outcome {
		result, err := process(t.Input)
		if err != nil {
			p.printf("task %s failed %s\n", t.ID, codeBadInput)
			return orbit.Failed(codeBadInput, err.Error())
		}
		p.printf("task %s succeeded\n", t.ID)
		return orbit.Succeeded(result)
	})
	if err != nil {
		return err
	}
	p.printf("working on queue %s at %s; Ctrl-C stops\n", creds.QueueID, creds.URL)
	if err := w.Run(ctx); err != nil {
		return err
	}
	p.printf("stopped\n")
	return nil
}

// errBadInput is the error of an input without a text.
var errBadInput = errors.New(`the input must be a JSON object with a string member "text"`)

// process computes the result of one task: for {"text": "..."} it returns
// {"length": N, "upper": "..."} with N the number of characters of the text
// and upper the text in upper case; anything else is errBadInput.
func process(input json.RawMessage) (json.RawMessage, error) {
	var in struct {
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(input, &in); err != nil || in.Text == nil {
		return nil, errBadInput
	}
	return json.Marshal(struct {
		Length int    `json:"length"`
		Upper  string `json:"upper"`
	}{utf8.RuneCountInString(*in.Text), strings.ToUpper(*in.Text)})
}

// printer writes whole lines from concurrent handlers.
type printer struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format, args...)
}
