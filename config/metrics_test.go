package config_test

import (
	"strings"
	"testing"

	"github.com/orbitrun/orbit/config"
)

// TestO1_MetricsConfig: server.metrics_listen defaults to loopback 9090,
// may be empty (disabled), must be host:port and must not be the API
// listener; metrics.refresh_interval must be positive.
func TestO1_MetricsConfig(t *testing.T) {
	t.Parallel()
	def := config.Default()
	if def.Server.MetricsListen != "127.0.0.1:9090" || def.Metrics.RefreshInterval.String() != "10s" {
		t.Errorf("defaults %q, %s", def.Server.MetricsListen, def.Metrics.RefreshInterval)
	}
	for name, tc := range map[string]struct {
		change func(*config.Config)
		want   string
	}{
		"Disabled":        {func(c *config.Config) { c.Server.MetricsListen = "" }, ""},
		"NotAnAddress":    {func(c *config.Config) { c.Server.MetricsListen = "9090" }, "server.metrics_listen"},
		"TheAPIListener":  {func(c *config.Config) { c.Server.MetricsListen = c.Server.Listen }, "must differ from server.listen"},
		"NoRefreshPeriod": {func(c *config.Config) { c.Metrics.RefreshInterval = 0 }, "metrics.refresh_interval"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := config.Default()
			tc.change(c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}
