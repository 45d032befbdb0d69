package tasks_test

import (
	"database/sql"
	"net/http"
	"testing"
)

// auditRecord is one row of audit_log.
type auditRecord struct {
	NamespaceID  string
	CredentialID sql.NullString
	Action       string
	Reason       string
}

// auditOf returns the audit records of a subject, oldest first.
func (e *env) auditOf(t *testing.T, subjectID string) []auditRecord {
	t.Helper()
	rows, err := e.srv.DB.QueryContext(t.Context(), `
		SELECT namespace_id, credential_id, action, reason FROM audit_log
		WHERE subject_id = ? ORDER BY created_at, id`, subjectID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []auditRecord
	for rows.Next() {
		var r auditRecord
		if err := rows.Scan(&r.NamespaceID, &r.CredentialID, &r.Action, &r.Reason); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Cancels and reviews are recorded in the audit log, in the transaction of
// the change, with the acting credential and the reason given.
func TestAudit_CancelAndReview(t *testing.T) {
	t.Parallel()
	e := startServer(t)

	t.Run("Cancel", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "audit-cancel")
		task := e.submit(t, c, submitBody(c.QueueID, `{}`))
		wantStatus(t, e.cancel(t, c, task.ID, `{"reason":"order withdrawn"}`), http.StatusOK)
		want := auditRecord{NamespaceID: c.NamespaceID, CredentialID: sql.NullString{String: c.CredentialID, Valid: true}, Action: "task.cancel", Reason: "order withdrawn"}
		if got := e.auditOf(t, task.ID); len(got) != 1 || got[0] != want {
			t.Fatalf("audit records %+v, want one %+v", got, want)
		}
	})

	t.Run("Review", func(t *testing.T) {
		t.Parallel()
		c := e.cred(t, "audit-review")
		task := e.needsReview(t, c, `{"queue_id":"`+c.QueueID+`","input":{},"max_attempts":1}`)
		wantStatus(t, e.review(t, c, task.ID, `{"expected_revision":"3","resolution":"requeue","reason":"nothing was charged"}`), http.StatusOK)
		want := auditRecord{NamespaceID: c.NamespaceID, CredentialID: sql.NullString{String: c.CredentialID, Valid: true}, Action: "task.review.requeue", Reason: "nothing was charged"}
		if got := e.auditOf(t, task.ID); len(got) != 1 || got[0] != want {
			t.Fatalf("audit records %+v, want one %+v", got, want)
		}
	})
}
