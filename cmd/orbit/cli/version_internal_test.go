package cli

import (
	"runtime/debug"
	"testing"
)

// Without -ldflags, orbit version takes the version and revision from the
// go command's build information, and says "(devel)" and "unknown" only
// when that has none either.
func TestVersion_FallsBackToBuildInfo(t *testing.T) {
	t.Parallel()
	stamped := &debug.BuildInfo{
		Main: debug.Module{Version: "v1.4.0"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123abc"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	tests := []struct {
		name, v, rev   string
		bi             *debug.BuildInfo
		wantV, wantRev string
	}{
		{"Ldflags", "v2.0.0", "feedbeef", stamped, "v2.0.0", "feedbeef"},
		{"BuildInfo", "", "", stamped, "v1.4.0", "0123abc+dirty"},
		{"Nothing", "", "", &debug.BuildInfo{Main: debug.Module{Version: ""}}, "(devel)", "unknown"},
		{"NoBuildInfo", "", "", nil, "(devel)", "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if v, rev := buildVersion(tt.v, tt.rev, tt.bi); v != tt.wantV || rev != tt.wantRev {
				t.Errorf("buildVersion = %q, %q; want %q, %q", v, rev, tt.wantV, tt.wantRev)
			}
		})
	}
}
