package modules

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/gorilla/mux"
	"github.com/hashicorp/go-multierror"
)

// Instances holds one fresh instance of every registered module, keyed by ID.
// The config loader decodes each Configurer's section into its instance; a
// Host is then built from the instances a command needs.
type Instances map[string]Module

// NewInstances creates one instance of every registered module.
func NewInstances() Instances {
	all := Instances{}
	for _, info := range Registered() {
		all[info.ID] = info.New()
	}
	return all
}

// Sections returns the config section of every instance that has one, keyed
// by module ID, for the config loader.
func (in Instances) Sections() map[string]any {
	sections := map[string]any{}
	for id, m := range in {
		if c, ok := m.(Configurer); ok {
			sections[id] = c.Config()
		}
	}
	return sections
}

// Validate runs every Validator and returns all their errors together.
func (in Instances) Validate() error {
	var errs *multierror.Error
	ids := make([]string, 0, len(in))
	for id := range in {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if v, ok := in[id].(Validator); ok {
			if err := v.Validate(); err != nil {
				errs = multierror.Append(errs, err)
			}
		}
	}
	return errs.ErrorOrNil()
}

// Host runs a set of modules: provision and start in dependency order, stop in
// reverse. A Host is used once.
type Host struct {
	order []Module
	byID  map[string]Module

	mu      sync.Mutex
	started []Module
}

// NewHost selects the modules named by ids, together with everything they
// require, from instances, and orders them so that each module comes after its
// requirements. Unknown IDs and dependency cycles are errors.
func NewHost(instances Instances, ids []string) (*Host, error) {
	h := &Host{byID: map[string]Module{}}
	const (
		unvisited = iota
		visiting
		done
	)
	state := map[string]int{}
	var visit func(id string, from string) error
	visit = func(id, from string) error {
		switch state[id] {
		case done:
			return nil
		case visiting:
			return fmt.Errorf("modules: dependency cycle through %q", id)
		}
		m, ok := instances[id]
		if !ok {
			if from == "" {
				return fmt.Errorf("modules: unknown module %q", id)
			}
			return fmt.Errorf("modules: module %q requires unknown module %q", from, id)
		}
		state[id] = visiting
		requires := append([]string(nil), m.OrbitModule().Requires...)
		sort.Strings(requires)
		for _, dep := range requires {
			if err := visit(dep, id); err != nil {
				return err
			}
		}
		state[id] = done
		h.order = append(h.order, m)
		h.byID[id] = m
		return nil
	}
	sorted := append([]string(nil), ids...)
	sort.Strings(sorted)
	for _, id := range sorted {
		if err := visit(id, ""); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// IDs returns the IDs of the host's modules in start order.
func (h *Host) IDs() []string {
	ids := make([]string, len(h.order))
	for i, m := range h.order {
		ids[i] = m.OrbitModule().ID
	}
	return ids
}

// Provision calls every Provisioner in start order with env, stopping at the
// first failure.
func (h *Host) Provision(ctx context.Context, env *Env) error {
	env.host = h
	for _, m := range h.order {
		if p, ok := m.(Provisioner); ok {
			if err := p.Provision(ctx, env); err != nil {
				return fmt.Errorf("modules: provision %s: %w", m.OrbitModule().ID, err)
			}
		}
	}
	return nil
}

// Routes mounts the routes of every Router, in start order.
func (h *Host) Routes(r *mux.Router) {
	for _, m := range h.order {
		if rt, ok := m.(Router); ok {
			rt.Routes(r)
		}
	}
}

// Start starts every Starter in dependency order. If one fails, the modules
// already started are stopped in reverse order and all errors are returned.
func (h *Host) Start(ctx context.Context) error {
	for _, m := range h.order {
		h.mu.Lock()
		h.started = append(h.started, m)
		h.mu.Unlock()
		if s, ok := m.(Starter); ok {
			if err := s.Start(ctx); err != nil {
				// The failed module is stopped too: Stop must be safe after a failed Start.
				errs := multierror.Append(nil, fmt.Errorf("modules: start %s: %w", m.OrbitModule().ID, err))
				if stopErr := h.Stop(ctx); stopErr != nil {
					errs = multierror.Append(errs, stopErr)
				}
				return errs
			}
		}
	}
	return nil
}

// Stop stops the started modules in reverse start order and returns every
// error. It is idempotent: a second call does nothing.
func (h *Host) Stop(ctx context.Context) error {
	h.mu.Lock()
	started := h.started
	h.started = nil
	h.mu.Unlock()
	var errs *multierror.Error
	for i := len(started) - 1; i >= 0; i-- {
		if s, ok := started[i].(Stopper); ok {
			if err := s.Stop(ctx); err != nil {
				errs = multierror.Append(errs, fmt.Errorf("modules: stop %s: %w", started[i].OrbitModule().ID, err))
			}
		}
	}
	return errs.ErrorOrNil()
}
