package admin_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
)

func lastUsed(t *testing.T, pool *sql.DB, id string) sql.NullTime {
	t.Helper()
	var at sql.NullTime
	if err := pool.QueryRowContext(t.Context(), `SELECT last_used_at FROM credentials WHERE id = ?`, id).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}

// TestO8_LastUsedRecordedAtMostOncePerMinute: authentication records when a
// credential was last used, but writes it only when the recorded time is a
// minute old, so a busy credential costs one UPDATE a minute.
func TestO8_LastUsedRecordedAtMostOncePerMinute(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c, token := f.credential(t, "reader", auth.PermTasksRead)
	if at := lastUsed(t, f.pool, c.ID); at.Valid {
		t.Fatalf("a new credential has last_used_at %v", at.Time)
	}
	before := time.Now().Add(-time.Second)
	if _, err := f.store.Authenticate(t.Context(), "Bearer "+token); err != nil {
		t.Fatal(err)
	}
	first := lastUsed(t, f.pool, c.ID)
	if !first.Valid || first.Time.Before(before) {
		t.Fatalf("after authenticating, last_used_at = %v, want about now", first)
	}
	if _, err := f.store.Authenticate(t.Context(), "Bearer "+token); err != nil {
		t.Fatal(err)
	}
	if again := lastUsed(t, f.pool, c.ID); !again.Time.Equal(first.Time) {
		t.Errorf("a second authentication within a minute rewrote last_used_at: %v -> %v", first.Time, again.Time)
	}
	// A recorded time older than a minute is brought up to date.
	old := time.Now().UTC().Add(-2 * time.Minute)
	if _, err := f.pool.ExecContext(t.Context(), `UPDATE credentials SET last_used_at = ? WHERE id = ?`, old, c.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Authenticate(t.Context(), "Bearer "+token); err != nil {
		t.Fatal(err)
	}
	if now := lastUsed(t, f.pool, c.ID); !now.Time.After(old.Add(time.Minute)) {
		t.Errorf("last_used_at of two minutes ago was not updated: %v", now.Time)
	}
	// A refused token records nothing.
	other, _ := f.credential(t, "unused", auth.PermTasksRead)
	if _, err := f.store.Authenticate(t.Context(), "Bearer not-a-token"); err == nil {
		t.Fatal("a wrong token authenticated")
	}
	if at := lastUsed(t, f.pool, other.ID); at.Valid {
		t.Errorf("an unused credential has last_used_at %v", at.Time)
	}
}
