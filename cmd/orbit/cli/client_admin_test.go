//go:build linux

package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/testkit/testdb"
	"github.com/orbitrun/orbit/modules/admin"
)

// TestO8_AdminCredentialList: orbit admin credential list shows each
// credential's label, application and the other scope names, permissions,
// queue names, created and last-used times, never a token; as a table and
// as JSON.
func TestO8_AdminCredentialList(t *testing.T) {
	t.Parallel()
	cfg, pool := setup(t, testdb.NewDSN(t))
	used := bootstrap(t, cfg, "shop", "orders", "--event-access")
	unused := bootstrap(t, cfg, "shop", "refunds")
	if _, err := admin.NewStore(pool).Authenticate(t.Context(), "Bearer "+used.Token); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()

	r := execOrbit(t, dir, "", nil, "admin", "credential", "list", "--config", cfg)
	if r.err != nil {
		t.Fatalf("list: %v %s", r.err, r.stderr)
	}
	header := strings.Fields(strings.SplitN(r.stdout, "\n", 2)[0])
	want := []string{"ID", "LABEL", "NAMESPACE", "APPLICATION", "ENVIRONMENT", "STATE", "PERMISSIONS", "QUEUES", "CREATED", "LAST_USED"}
	if strings.Join(header, " ") != strings.Join(want, " ") {
		t.Errorf("header %v, want %v", header, want)
	}
	// The label "bootstrap orders" is two words in the table.
	row := tableRow(t, r.stdout, used.CredentialID)
	if row[3] != "shop" || row[4] != "app" || row[5] != "dev" || row[6] != "active" || row[8] != "orders" || !strings.Contains(row[7], "events:manage") {
		t.Errorf("row of the used credential %v", row)
	}
	if _, err := time.Parse(time.RFC3339, row[10]); err != nil {
		t.Errorf("last used %q: %v", row[10], err)
	}
	if row := tableRow(t, r.stdout, unused.CredentialID); row[len(row)-1] != "-" || row[8] != "refunds" {
		t.Errorf("row of the unused credential %v", row)
	}

	r = execOrbit(t, dir, "", nil, "admin", "credential", "list", "--config", cfg, "--namespace", "shop", "-o", "json")
	if r.err != nil {
		t.Fatalf("list -o json: %v %s", r.err, r.stderr)
	}
	var views []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &views); err != nil || len(views) != 2 {
		t.Fatalf("json: %v\n%s", err, r.stdout)
	}
	for _, v := range views {
		for _, k := range []string{"id", "label", "namespace", "application", "environment", "state", "permissions", "queues", "queue_ids", "created_at"} {
			if _, ok := v[k]; !ok {
				t.Errorf("credential %v has no %s", v["id"], k)
			}
		}
		_, hasLastUsed := v["last_used_at"]
		if hasLastUsed != (v["id"] == used.CredentialID) {
			t.Errorf("credential %v: last_used_at present = %v", v["id"], hasLastUsed)
		}
	}
	for _, tok := range []string{used.Token, unused.Token} {
		if strings.Contains(r.stdout, tok) {
			t.Error("credential list printed a token")
		}
	}
	wantFail(t, execOrbit(t, dir, "", nil, "admin", "credential", "list", "--config", cfg, "-o", "yaml"), "-o/--output")
}
