package config

import (
	"strings"
	"testing"
)

// TestO5_TracingSection: tracing is off by default; the file and the
// environment set it; a bad endpoint or ratio is reported with its key and
// line, without repeating an endpoint that may hold a secret.
func TestO5_TracingSection(t *testing.T) {
	t.Parallel()
	if d := Default().Tracing; d.OTLPEndpoint != "" || d.SampleRatio != 1 {
		t.Fatalf("default tracing %+v, want off and ratio 1", d)
	}
	env := func(name string) (string, bool) {
		if name == "ORBIT_TRACING_OTLP_ENDPOINT" {
			return "http://collector:4318", true
		}
		return "", false
	}
	core := Default()
	if _, err := Load(Source{File: writeFile(t, "tracing:\n  sample_ratio: 0.25\n"), LookupEnv: env}, core, nil); err != nil {
		t.Fatal(err)
	}
	if core.Tracing.OTLPEndpoint != "http://collector:4318" || core.Tracing.SampleRatio != 0.25 {
		t.Fatalf("tracing %+v", core.Tracing)
	}
	if err := core.Validate(); err != nil {
		t.Fatalf("Validate = %v", err)
	}

	path := writeFile(t, "tracing:\n  otlp_endpoint: \"http://user:Secret99@collector:4318\"\n  sample_ratio: 2\n")
	core, positions := Default(), map[string]string{}
	if _, err := Load(Source{File: path, LookupEnv: noEnv, Positions: positions}, core, nil); err != nil {
		t.Fatal(err)
	}
	err := core.ValidateAt(positions)
	for _, want := range []string{path + ":2: tracing.otlp_endpoint: must not contain user information", path + ":3: tracing.sample_ratio: must be between 0 and 1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateAt = %v, want %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "Secret99") {
		t.Errorf("ValidateAt = %q repeats the endpoint", err)
	}
	for _, bad := range []string{"collector:4318", "grpc://collector:4317", "http://collector:4318/v1/traces?x=1"} {
		core := Default()
		core.Tracing.OTLPEndpoint = bad
		if err := core.Validate(); err == nil || !strings.Contains(err.Error(), "tracing.otlp_endpoint") {
			t.Errorf("endpoint %q: Validate = %v", bad, err)
		}
	}
}
