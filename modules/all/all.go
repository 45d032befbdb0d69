// Package all plugs every platform module into a binary. cmd/orbit (through
// cmd/orbit/cli) and the test server import it; adding a module to Orbit is
// one line here.
package all

import (
	_ "github.com/orbitrun/orbit/modules/admin"
	_ "github.com/orbitrun/orbit/modules/cluster"
	_ "github.com/orbitrun/orbit/modules/console"
	_ "github.com/orbitrun/orbit/modules/events"
	_ "github.com/orbitrun/orbit/modules/inboxreceiver"
	_ "github.com/orbitrun/orbit/modules/subscriptions"
	_ "github.com/orbitrun/orbit/modules/tasks"
	_ "github.com/orbitrun/orbit/modules/workers"
)
