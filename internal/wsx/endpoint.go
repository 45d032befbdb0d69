package wsx

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/httpx"
)

// Endpoint is embedded by a module that serves one WebSocket entry: its
// Routes and Stop are the module's. The zero Endpoint, of a module that was
// never provisioned, mounts nothing and stops at once.
type Endpoint struct {
	module string
	path   string
	entry  *Entry
	serve  http.Handler
	drain  func(context.Context) error
}

// NewEndpoint builds the entry of module from cfg (see NewEntry), whose
// upgrades authenticate with a and log to logger, and its endpoint, which
// serves it at path with serve. drain waits, within the stop's context, for
// what connections leave behind when they close, such as the node's batch of
// ACKs.
func NewEndpoint(module, path string, a auth.Authenticator, logger *slog.Logger, cfg Config, serve http.HandlerFunc, drain func(context.Context) error) (*Entry, Endpoint, error) {
	cfg.Authenticate, cfg.Logger = FromAuthenticator(a), logger
	if cfg.Name == "" {
		cfg.Name = module
	}
	entry, err := NewEntry(cfg)
	if err != nil {
		return nil, Endpoint{}, fmt.Errorf("%s: %w", module, err)
	}
	return entry, Endpoint{module: module, path: path, entry: entry, serve: serve, drain: drain}, nil
}

// Routes mounts the entry. The management deadline does not apply to a
// connection.
func (p *Endpoint) Routes(r *mux.Router) {
	if p.serve != nil {
		r.Handle(p.path, httpx.NoDeadline(p.serve))
	}
}

// Stop closes every connection of the entry with 1001 and waits for their
// handlers and the drain within ctx. What the connections held in the
// database (leases, deliveries) stays there. It is idempotent.
func (p *Endpoint) Stop(ctx context.Context) error {
	var waits []func(context.Context) error
	if p.drain != nil {
		waits = append(waits, p.drain)
	}
	if err := p.entry.Stop(ctx, waits...); err != nil {
		return fmt.Errorf("%s: stop: %w", p.module, err)
	}
	return nil
}
