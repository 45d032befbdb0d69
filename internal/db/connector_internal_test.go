package db

import (
	"errors"
	"testing"
)

// The status a Galera node reports is read by wsrepReady; a real cluster
// is needed to see a node in each state, so the values are given here.
func TestN8_WsrepReadyOnlyWhenSynced(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		status map[string]string
		ready  bool
	}{
		"Synced":   {map[string]string{"wsrep_ready": "ON", "wsrep_local_state": "4", "wsrep_local_state_comment": "Synced"}, true},
		"Joining":  {map[string]string{"wsrep_ready": "OFF", "wsrep_local_state": "1", "wsrep_local_state_comment": "Joining"}, false},
		"Donor":    {map[string]string{"wsrep_ready": "ON", "wsrep_local_state": "2", "wsrep_local_state_comment": "Donor/Desynced"}, false},
		"Joined":   {map[string]string{"wsrep_ready": "ON", "wsrep_local_state": "3", "wsrep_local_state_comment": "Joined"}, false},
		"NotReady": {map[string]string{"wsrep_ready": "OFF", "wsrep_local_state": "4"}, false},
		"Missing":  {map[string]string{}, false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := wsrepReady(c.status)
			if (err == nil) != c.ready {
				t.Fatalf("wsrepReady = %v, want ready %v", err, c.ready)
			}
			if err != nil && (!errors.Is(err, ErrNotReady) || !IsUnavailable(err)) {
				t.Errorf("%v: not ErrNotReady, or not unavailable", err)
			}
		})
	}
}
