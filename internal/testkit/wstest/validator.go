// Package wstest is a raw WebSocket test client for Orbit's WebSocket
// protocols (orbit.workers.v1, orbit.events.v1) and a validator of their
// frames against the protocol's JSON Schema (C-19).
//
// A protocol's schema is a Draft 2020-12 document with two definitions,
// #/$defs/clientFrame and #/$defs/serverFrame. A Client records every frame
// it sends and receives and validates each against the matching definition
// as it goes, so that every test that talks to a server also checks the
// schema against what the server really does:
//
//	v := wstest.MustLoad(t, "../../docs/api/workers.schema.json")
//	c := wstest.Dial(t, wstest.Options{URL: url, Subprotocol: "orbit.workers.v1", Token: token, Validator: v})
//	id := c.Send("worker.hello", map[string]any{"queue_id": q, "capacity": 1})
//	welcome := c.Reply(id)
//
// The package knows the envelope of C-18 and nothing about the frame types
// of either protocol.
package wstest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The definitions every protocol schema has (C-19).
const (
	ClientFrame = "clientFrame"
	ServerFrame = "serverFrame"
)

// Validator checks frames against one protocol schema. It is safe for
// concurrent use.
type Validator struct {
	path   string
	client *jsonschema.Schema
	server *jsonschema.Schema
}

// LoadValidator compiles the schema file at path, which must define
// #/$defs/clientFrame and #/$defs/serverFrame.
func LoadValidator(path string) (*Validator, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("wstest: schema %s: %w", path, err)
	}
	raw, err := os.ReadFile(abs)
	if err != nil {
		return nil, fmt.Errorf("wstest: schema: %w", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("wstest: schema %s: %w", path, err)
	}
	url := "file://" + filepath.ToSlash(abs)
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("wstest: schema %s: %w", path, err)
	}
	v := &Validator{path: path}
	if v.client, err = c.Compile(url + "#/$defs/" + ClientFrame); err != nil {
		return nil, fmt.Errorf("wstest: schema %s: %w", path, err)
	}
	if v.server, err = c.Compile(url + "#/$defs/" + ServerFrame); err != nil {
		return nil, fmt.Errorf("wstest: schema %s: %w", path, err)
	}
	return v, nil
}

// MustLoad is LoadValidator that fails the test on error.
func MustLoad(t testing.TB, path string) *Validator {
	t.Helper()
	v, err := LoadValidator(path)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Path returns the path the schema was loaded from.
func (v *Validator) Path() string { return v.path }

// Validate checks the raw JSON text of one frame against the definition
// def, ClientFrame or ServerFrame. It returns nil when the frame conforms,
// and otherwise an error that lists every violation.
func (v *Validator) Validate(def string, frame []byte) error {
	var sch *jsonschema.Schema
	switch def {
	case ClientFrame:
		sch = v.client
	case ServerFrame:
		sch = v.server
	default:
		return fmt.Errorf("wstest: unknown definition %q", def)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(frame))
	if err != nil {
		return fmt.Errorf("wstest: frame is not JSON: %w", err)
	}
	if err := sch.Validate(inst); err != nil {
		return fmt.Errorf("wstest: frame does not match %s#/$defs/%s: %w", v.path, def, err)
	}
	return nil
}

// ValidateClient is Validate(ClientFrame, frame).
func (v *Validator) ValidateClient(frame []byte) error { return v.Validate(ClientFrame, frame) }

// ValidateServer is Validate(ServerFrame, frame).
func (v *Validator) ValidateServer(frame []byte) error { return v.Validate(ServerFrame, frame) }

// LoadOnce returns a function that compiles the schema at path on its first
// call, for the whole test binary, and fails the calling test if it could
// not.
func LoadOnce(path string) func(testing.TB) *Validator {
	load := sync.OnceValues(func() (*Validator, error) { return LoadValidator(path) })
	return func(t testing.TB) *Validator {
		t.Helper()
		v, err := load()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}
