package modules

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gorilla/mux"
)

// journal records, in order, what the fake modules of one test were asked
// to do.
type journal struct {
	mu      sync.Mutex
	entries []string
}

func (j *journal) add(format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.entries = append(j.entries, fmt.Sprintf(format, args...))
}

func (j *journal) get() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.entries)
}

// fake is a module with every optional capability; each call is written to
// its journal.
type fake struct {
	id       string
	requires []string
	j        *journal

	provisionErr, startErr, stopErr error
	// onProvision, when set, runs inside Provision.
	onProvision func(env *Env)
}

func (f *fake) OrbitModule() Info {
	return Info{ID: f.id, Requires: f.requires, Roles: []string{"server"}, New: func() Module { return f }}
}

func (f *fake) Provision(_ context.Context, env *Env) error {
	f.j.add("provision %s", f.id)
	if f.onProvision != nil {
		f.onProvision(env)
	}
	return f.provisionErr
}

func (f *fake) Routes(r *mux.Router) {
	f.j.add("routes %s", f.id)
	r.HandleFunc("/"+f.id, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(f.id))
	})
}

func (f *fake) Start(context.Context) error {
	f.j.add("start %s", f.id)
	return f.startErr
}

func (f *fake) Stop(context.Context) error {
	f.j.add("stop %s", f.id)
	return f.stopErr
}

var (
	_ Provisioner = (*fake)(nil)
	_ Router      = (*fake)(nil)
	_ Starter     = (*fake)(nil)
	_ Stopper     = (*fake)(nil)
)

// passive is a module without any optional capability.
type passive struct {
	id       string
	requires []string
}

func (p *passive) OrbitModule() Info {
	return Info{ID: p.id, Requires: p.requires, New: func() Module { return p }}
}

// graph builds instances of fake modules sharing one journal from a map of
// module ID to the IDs it requires.
func graph(j *journal, deps map[string][]string) (Instances, map[string]*fake) {
	in := Instances{}
	fakes := map[string]*fake{}
	for id, requires := range deps {
		f := &fake{id: id, requires: requires, j: j}
		in[id] = f
		fakes[id] = f
	}
	return in, fakes
}

// newHost is NewHost for graphs that must be valid.
func newHost(t *testing.T, in Instances, ids ...string) *Host {
	t.Helper()
	h, err := NewHost(in, ids)
	if err != nil {
		t.Fatalf("NewHost(%v): %v", ids, err)
	}
	return h
}

func checkEntries(t *testing.T, j *journal, want ...string) {
	t.Helper()
	if got := j.get(); !slices.Equal(got, want) {
		t.Fatalf("calls:\n got  %q\n want %q", got, want)
	}
}

func TestHostStartOrderIsTopological(t *testing.T) {
	t.Parallel()
	j := &journal{}
	in, _ := graph(j, map[string][]string{
		"api":     {"tasks", "events"},
		"tasks":   {"store"},
		"events":  {"store", "tasks"},
		"store":   nil,
		"metrics": nil,
		"unused":  {"store"},
	})
	h := newHost(t, in, "metrics", "api", "api")

	want := []string{"store", "tasks", "events", "api", "metrics"}
	if got := h.IDs(); !slices.Equal(got, want) {
		t.Fatalf("IDs() = %v, want %v", got, want)
	}
	// Whatever the exact order, every module comes after what it requires.
	pos := map[string]int{}
	for i, id := range h.IDs() {
		pos[id] = i
	}
	for _, id := range h.IDs() {
		for _, dep := range in[id].OrbitModule().Requires {
			if pos[dep] >= pos[id] {
				t.Errorf("%s starts before its requirement %s", id, dep)
			}
		}
	}

	if err := h.Provision(context.Background(), &Env{}); err != nil {
		t.Fatal(err)
	}
	r := mux.NewRouter()
	h.Routes(r)
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var calls []string
	for _, step := range []string{"provision", "routes", "start"} {
		for _, id := range want {
			calls = append(calls, step+" "+id)
		}
	}
	checkEntries(t, j, calls...)

	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/events", nil))
	if rec.Body.String() != "events" {
		t.Fatalf("route of module events not mounted: %d %q", rec.Code, rec.Body)
	}
}

func TestHostStopsInReverseOrder(t *testing.T) {
	t.Parallel()

	t.Run("AfterStart", func(t *testing.T) {
		t.Parallel()
		j := &journal{}
		in, _ := graph(j, map[string][]string{"a": nil, "b": {"a"}, "c": {"b"}})
		h := newHost(t, in, "c")
		if err := h.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := h.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		checkEntries(t, j, "start a", "start b", "start c", "stop c", "stop b", "stop a")
	})

	t.Run("Idempotent", func(t *testing.T) {
		t.Parallel()
		j := &journal{}
		in, _ := graph(j, map[string][]string{"a": nil, "b": {"a"}})
		h := newHost(t, in, "b")
		if err := h.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			if err := h.Stop(context.Background()); err != nil {
				t.Fatalf("Stop #%d: %v", i+1, err)
			}
		}
		checkEntries(t, j, "start a", "start b", "stop b", "stop a")
	})

	t.Run("ConcurrentStopsStopEachModuleOnce", func(t *testing.T) {
		t.Parallel()
		j := &journal{}
		in, _ := graph(j, map[string][]string{"a": nil, "b": {"a"}, "c": {"a"}})
		h := newHost(t, in, "b", "c")
		if err := h.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Go(func() {
				if err := h.Stop(context.Background()); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		checkEntries(t, j, "start a", "start b", "start c", "stop c", "stop b", "stop a")
	})

	t.Run("WithoutStart", func(t *testing.T) {
		t.Parallel()
		j := &journal{}
		in, _ := graph(j, map[string][]string{"a": nil, "b": {"a"}})
		h := newHost(t, in, "b")
		if err := h.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := h.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		checkEntries(t, j)
	})

	t.Run("ModulesWithoutLifecycle", func(t *testing.T) {
		t.Parallel()
		j := &journal{}
		in, _ := graph(j, map[string][]string{"a": nil, "c": {"b"}})
		in["b"] = &passive{id: "b", requires: []string{"a"}}
		h := newHost(t, in, "c")
		if got, want := h.IDs(), []string{"a", "b", "c"}; !slices.Equal(got, want) {
			t.Fatalf("IDs() = %v, want %v", got, want)
		}
		if err := h.Provision(context.Background(), &Env{}); err != nil {
			t.Fatal(err)
		}
		h.Routes(mux.NewRouter())
		if err := h.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := h.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		checkEntries(t, j, "provision a", "provision c", "routes a", "routes c", "start a", "start c", "stop c", "stop a")
	})

	t.Run("ReturnsEveryStopError", func(t *testing.T) {
		t.Parallel()
		j := &journal{}
		in, fakes := graph(j, map[string][]string{"a": nil, "b": {"a"}, "c": {"b"}})
		errA, errC := errors.New("a would not stop"), errors.New("c would not stop")
		fakes["a"].stopErr, fakes["c"].stopErr = errA, errC
		h := newHost(t, in, "c")
		if err := h.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		err := h.Stop(context.Background())
		if !errors.Is(err, errA) || !errors.Is(err, errC) {
			t.Fatalf("Stop() = %v, want both stop errors", err)
		}
		for _, want := range []string{"modules: stop a:", "modules: stop c:"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Stop() = %q, lacks %q", err, want)
			}
		}
		checkEntries(t, j, "start a", "start b", "start c", "stop c", "stop b", "stop a")
	})
}

func TestHostFailedStartStopsWhatStarted(t *testing.T) {
	t.Parallel()
	j := &journal{}
	in, fakes := graph(j, map[string][]string{"a": nil, "b": {"a"}, "c": {"b"}, "d": {"c"}})
	errStart := errors.New("c cannot start")
	errStopA := errors.New("a cannot stop")
	errStopC := errors.New("c cannot stop either")
	fakes["c"].startErr = errStart
	fakes["c"].stopErr = errStopC
	fakes["a"].stopErr = errStopA
	h := newHost(t, in, "d")

	err := h.Start(context.Background())
	if err == nil {
		t.Fatal("Start succeeded, want the start error of c")
	}
	for _, want := range []error{errStart, errStopC, errStopA} {
		if !errors.Is(err, want) {
			t.Errorf("Start() = %q, lacks %q", err, want)
		}
	}
	for _, want := range []string{"modules: start c:", "modules: stop c:", "modules: stop a:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Start() = %q, lacks %q", err, want)
		}
	}
	// The failed module is stopped too, and d never starts.
	checkEntries(t, j, "start a", "start b", "start c", "stop c", "stop b", "stop a")

	// Stop after a failed Start has nothing left to do.
	if err := h.Stop(context.Background()); err != nil {
		t.Fatalf("Stop after failed Start: %v", err)
	}
	checkEntries(t, j, "start a", "start b", "start c", "stop c", "stop b", "stop a")
}

func TestHostProvision(t *testing.T) {
	t.Parallel()

	t.Run("SeesRequiredModules", func(t *testing.T) {
		t.Parallel()
		j := &journal{}
		in, fakes := graph(j, map[string][]string{"a": nil, "b": {"a"}, "other": nil})
		var fromB, missing Module
		fakes["b"].onProvision = func(env *Env) {
			fromB = env.Module("a")
			missing = env.Module("other")
		}
		h := newHost(t, in, "b")
		if err := h.Provision(context.Background(), &Env{}); err != nil {
			t.Fatal(err)
		}
		if fromB != in["a"] {
			t.Errorf("env.Module(a) = %v, want the instance of a", fromB)
		}
		if missing != nil {
			t.Errorf("env.Module(other) = %v, want nil for a module outside the run", missing)
		}
		if m := (&Env{}).Module("a"); m != nil {
			t.Errorf("Module on an Env without host = %v, want nil", m)
		}
	})

	t.Run("StopsAtFirstFailure", func(t *testing.T) {
		t.Parallel()
		j := &journal{}
		in, fakes := graph(j, map[string][]string{"a": nil, "b": {"a"}, "c": {"b"}})
		errB := errors.New("no table")
		fakes["b"].provisionErr = errB
		h := newHost(t, in, "c")
		err := h.Provision(context.Background(), &Env{})
		if !errors.Is(err, errB) || !strings.Contains(err.Error(), "modules: provision b:") {
			t.Fatalf("Provision() = %v, want the error of b, named", err)
		}
		checkEntries(t, j, "provision a", "provision b")
	})
}

func TestNewHostErrors(t *testing.T) {
	t.Parallel()
	j := &journal{}
	tests := []struct {
		name string
		deps map[string][]string
		ids  []string
		want string
	}{
		{name: "UnknownModule", deps: map[string][]string{"a": nil}, ids: []string{"a", "ghost"}, want: `unknown module "ghost"`},
		{name: "MissingDependency", deps: map[string][]string{"a": nil, "b": {"a", "ghost"}}, ids: []string{"b"}, want: `module "b" requires unknown module "ghost"`},
		{name: "Cycle", deps: map[string][]string{"a": {"c"}, "b": {"a"}, "c": {"b"}}, ids: []string{"b"}, want: "dependency cycle"},
		{name: "SelfCycle", deps: map[string][]string{"a": {"a"}}, ids: []string{"a"}, want: `dependency cycle through "a"`},
		{name: "CycleBelowValidModule", deps: map[string][]string{"top": {"x"}, "x": {"y"}, "y": {"x"}}, ids: []string{"top"}, want: "dependency cycle"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in, _ := graph(j, tt.deps)
			h, err := NewHost(in, tt.ids)
			if err == nil {
				t.Fatalf("NewHost(%v) = %v, want an error", tt.ids, h.IDs())
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewHost(%v) = %q, want it to contain %q", tt.ids, err, tt.want)
			}
		})
	}
}

// configured is a module with a config section and a validator.
type configured struct {
	id  string
	cfg struct {
		Size int `yaml:"size"`
	}
	err error
}

func (c *configured) OrbitModule() Info {
	return Info{ID: c.id, New: func() Module { return c }}
}
func (c *configured) Config() any     { return &c.cfg }
func (c *configured) Validate() error { return c.err }

var (
	_ Configurer = (*configured)(nil)
	_ Validator  = (*configured)(nil)
)

func TestInstancesSectionsAndValidate(t *testing.T) {
	t.Parallel()
	errX, errY := errors.New("x.size: too small"), errors.New("y.size: too large")
	x, y := &configured{id: "x", err: errX}, &configured{id: "y", err: errY}
	in := Instances{"x": x, "y": y, "z": &passive{id: "z"}, "ok": &configured{id: "ok"}}

	sections := in.Sections()
	if len(sections) != 3 || sections["x"] != x.Config() || sections["ok"] == nil {
		t.Fatalf("Sections() = %v, want the sections of x, y and ok", sections)
	}
	if _, ok := sections["z"]; ok {
		t.Fatal("Sections() has an entry for a module without config")
	}
	err := in.Validate()
	if !errors.Is(err, errX) || !errors.Is(err, errY) {
		t.Fatalf("Validate() = %v, want both errors", err)
	}
	if err := (Instances{"ok": &configured{id: "ok"}, "z": &passive{id: "z"}}).Validate(); err != nil {
		t.Fatalf("Validate() = %v, want nil", err)
	}
}

// registrant is a module whose info is fixed, for the registry tests. The
// registry is global and outlives a test run (go test -count), so every
// test registers IDs of its own made by uniqueID.
type registrant struct{ info Info }

var registrations atomic.Int64

// uniqueID returns an ID no other registration of this process uses.
func uniqueID(name string) string {
	return fmt.Sprintf("hosttest-%s-%d", name, registrations.Add(1))
}

func (r registrant) OrbitModule() Info { return r.info }

func newRegistrant(id string, roles ...string) registrant {
	info := Info{ID: id, Roles: roles}
	info.New = func() Module { return registrant{info: info} }
	return registrant{info: info}
}

// mustPanic runs f and returns the message it panicked with.
func mustPanic(t *testing.T, f func()) (msg string) {
	t.Helper()
	defer func() {
		p := recover()
		if p == nil {
			t.Fatal("did not panic")
		}
		msg = fmt.Sprint(p)
	}()
	f()
	return ""
}

func TestRegister(t *testing.T) {
	t.Parallel()

	t.Run("ListsAndLooksUp", func(t *testing.T) {
		t.Parallel()
		alpha, beta := uniqueID("alpha"), uniqueID("beta")
		role, other := uniqueID("role"), uniqueID("other")
		Register(newRegistrant(beta, role, other))
		Register(newRegistrant(alpha, role))
		info, ok := Lookup(alpha)
		if !ok || info.ID != alpha {
			t.Fatalf("Lookup(%s) = %+v, %v", alpha, info, ok)
		}
		if _, ok := Lookup(uniqueID("missing")); ok {
			t.Fatal("Lookup found a module that was never registered")
		}
		if got, want := Role(role), []string{alpha, beta}; !slices.Equal(got, want) {
			t.Fatalf("Role(%s) = %v, want %v", role, got, want)
		}
		if got, want := Role(other), []string{beta}; !slices.Equal(got, want) {
			t.Fatalf("Role(%s) = %v, want %v", other, got, want)
		}
		var ids []string
		for _, info := range Registered() {
			ids = append(ids, info.ID)
		}
		if !slices.IsSorted(ids) || !slices.Contains(ids, alpha) || !slices.Contains(ids, beta) {
			t.Fatalf("Registered() = %v, want a sorted list with both modules", ids)
		}
		in := NewInstances()
		a, ok := in[alpha].(registrant)
		if !ok || a.info.ID != alpha {
			t.Fatalf("NewInstances()[%s] = %#v", alpha, in[alpha])
		}
	})

	t.Run("DuplicatePanics", func(t *testing.T) {
		t.Parallel()
		id := uniqueID("dup")
		Register(newRegistrant(id))
		msg := mustPanic(t, func() { Register(newRegistrant(id)) })
		if !strings.Contains(msg, fmt.Sprintf("%q registered twice", id)) {
			t.Fatalf("panic %q", msg)
		}
	})

	t.Run("NoConstructorPanics", func(t *testing.T) {
		t.Parallel()
		id := uniqueID("no-new")
		msg := mustPanic(t, func() { Register(registrant{info: Info{ID: id}}) })
		if !strings.Contains(msg, "no constructor") {
			t.Fatalf("panic %q", msg)
		}
		if _, ok := Lookup(id); ok {
			t.Fatal("a module without constructor was registered")
		}
	})

	invalid := []struct{ name, id string }{
		{"Empty", ""},
		{"UpperCase", "Admin"},
		{"Underscore", "hosttest_under"},
		{"LeadingDigit", "1hosttest"},
		{"LeadingDash", "-hosttest"},
		{"TrailingDash", "hosttest-"},
		{"DoubleDash", "hosttest--double"},
		{"Dot", "hosttest.dot"},
		{"Space", "hosttest space"},
		{"NonASCII", "hösttest"},
	}
	for _, tt := range invalid {
		t.Run("InvalidID"+tt.name, func(t *testing.T) {
			t.Parallel()
			msg := mustPanic(t, func() { Register(newRegistrant(tt.id)) })
			if !strings.Contains(msg, "invalid module id") {
				t.Fatalf("panic %q", msg)
			}
			if _, ok := Lookup(tt.id); ok {
				t.Fatalf("invalid id %q was registered", tt.id)
			}
		})
	}
}

// offerer is what a module requiring "offers" needs from it.
type offerer interface{ Offer() string }

type offering struct{ registrant }

func (offering) Offer() string { return "offered" }

func TestRequire_GivesTheCapabilityOfARequiredModule(t *testing.T) {
	t.Parallel()
	in := Instances{
		"offers": offering{registrant{info: Info{ID: "offers"}}},
		"other":  registrant{info: Info{ID: "other"}},
	}
	h, err := NewHost(in, []string{"offers", "other"})
	if err != nil {
		t.Fatal(err)
	}
	env := &Env{host: h}
	o, err := Require[offerer](env, "offers")
	if err != nil || o.Offer() != "offered" {
		t.Fatalf("Require = %v, %v", o, err)
	}
	if _, err := Require[offerer](env, "other"); err == nil {
		t.Fatal("a module that does not offer the capability was returned")
	}
	if _, err := Require[offerer](env, "missing"); err == nil {
		t.Fatal("a module outside the run was returned")
	}
}

func TestOffered_ListsEveryModuleOfTheRunThatOffers(t *testing.T) {
	t.Parallel()
	in := Instances{
		"first":  offering{registrant{info: Info{ID: "first"}}},
		"second": offering{registrant{info: Info{ID: "second", Requires: []string{"first"}}}},
		"other":  registrant{info: Info{ID: "other"}},
		"absent": offering{registrant{info: Info{ID: "absent"}}},
	}
	h, err := NewHost(in, []string{"second", "other"})
	if err != nil {
		t.Fatal(err)
	}
	got := Offered[offerer](&Env{host: h})
	if len(got) != 2 || got[0].(offering).info.ID != "first" || got[1].(offering).info.ID != "second" {
		t.Fatalf("Offered = %v, want first and second in start order", got)
	}
	if got := Offered[offerer](&Env{}); got != nil {
		t.Fatalf("Offered without a host = %v", got)
	}
}
