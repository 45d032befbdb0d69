package receiver

import (
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// OpenReceiverDB needs a DSN that names the database; its errors
// repeat nothing of the DSN. None of these reach a database.
func TestR1_OpenReceiverDBNeedsTheDatabaseName(t *testing.T) {
	t.Parallel()
	const password = "pw-never-printed"
	for _, tc := range []struct {
		name, dsn, want string
	}{
		{"NotSet", "", "ORBIT_RECEIVER_DSN is not set"},
		{"NoDatabase", "receiver:" + password + "@tcp(127.0.0.1:3306)/", "ORBIT_RECEIVER_DSN must name the database explicitly"},
		{"NoDatabaseNoSlash", "receiver:" + password + "@tcp(127.0.0.1:3306)/?parseTime=true", "must name the database explicitly"},
		{"NotADSN", "receiver:" + password + "@tcp(127.0.0.1:3306", "ORBIT_RECEIVER_DSN: not a valid MySQL DSN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, err := OpenReceiverDB(t.Context(), tc.dsn)
			if err == nil {
				db.Close()
				t.Fatal("OpenReceiverDB accepted the DSN")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to say %q", err, tc.want)
			}
			if strings.Contains(err.Error(), password) {
				t.Errorf("error %q repeats the password", err)
			}
		})
	}
}

// an unreachable receiver database is reported with the address tried
// but without the rest of the DSN (user, password).
func TestR7_UnreachableDatabaseNamesTheAddressOnly(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = "receiver", "pw-never-printed", "tcp", addr, "receiver_example"
	db, err := OpenReceiverDB(t.Context(), cfg.FormatDSN())
	if err == nil {
		db.Close()
		t.Fatal("OpenReceiverDB reached a closed port")
	}
	if want := "receiver database receiver_example: database unreachable at tcp " + addr + " (connection refused)"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}

	sock := filepath.Join(t.TempDir(), "none.sock")
	cfg.Net, cfg.Addr = "unix", sock
	db, err = OpenReceiverDB(t.Context(), cfg.FormatDSN())
	if err == nil {
		db.Close()
		t.Fatal("OpenReceiverDB reached a missing socket")
	}
	if want := "receiver database receiver_example: database unreachable at unix " + sock + " (no such socket)"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if strings.Contains(err.Error(), "pw-never-printed") || strings.Contains(err.Error(), "receiver@") {
		t.Errorf("error %q shows the credentials", err)
	}
}

// RECEIVER_NAME defaults to task-result-view.
func TestR8_ReceiverNameDefault(t *testing.T) {
	t.Setenv(EnvReceiverName, "")
	t.Setenv(EnvReceiverDSN, "")
	t.Setenv(EnvSubscriptionID, "")
	cfg, err := LoadConfig(false)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ReceiverName != "task-result-view" || cfg.Credentials != nil {
		t.Errorf("LoadConfig(false) = %+v; want the default name and no credentials", cfg)
	}
	t.Setenv(EnvReceiverName, "orders.view-2")
	if cfg, _ = LoadConfig(false); cfg.ReceiverName != "orders.view-2" {
		t.Errorf("RECEIVER_NAME=orders.view-2 gave %q", cfg.ReceiverName)
	}
}

// consume and demo need credentials; without a credentials file or
// ORBIT_URL and ORBIT_TOKEN, loading the configuration fails.
func TestR6_CredentialsAreRequired(t *testing.T) {
	for _, name := range []string{"ORBIT_CREDENTIALS_FILE", "ORBIT_URL", "ORBIT_TOKEN", "ORBIT_QUEUE_ID"} {
		t.Setenv(name, "")
	}
	if _, err := LoadConfig(true); err == nil {
		t.Fatal("LoadConfig(true) succeeded without credentials")
	}
	if err := Main(t.Context(), "consume", nil, nil); err == nil || errors.Is(err, ErrUsage) {
		t.Fatalf("consume without credentials = %v, want a credentials error", err)
	}
}
