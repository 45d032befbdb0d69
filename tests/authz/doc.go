// Package authz holds the authorization matrix of F-4: every route of the
// server, read from its router, and both WebSocket entries, against every
// way a caller can lack the right to a resource (C-1 … C-3, C-7, S-1,
// T-3), on real resources of a first credential. The package has no code
// of its own.
package authz
