// Package audit declares the writer of the audit log. The admin module owns
// the audit_log table and implements Writer; a module that records changes
// gets it with modules.Require[audit.Writer](env, "admin"). This package
// holds no SQL.
package audit

import (
	"context"
	"database/sql"
)

// Record is one entry of the audit log.
type Record struct {
	// NamespaceID is the namespace the change happened in.
	NamespaceID string
	// CredentialID is the acting credential; empty for operator commands.
	CredentialID string
	// Action says what happened, such as "credential.create" or
	// "task.cancel".
	Action string
	// SubjectID is the changed object.
	SubjectID string
	// Reason is the human reason given, never a secret.
	Reason string
}

// Writer appends records to the audit log.
type Writer interface {
	// Audit appends r inside tx, so that the record commits or rolls back
	// with the change it records. It costs one INSERT.
	Audit(ctx context.Context, tx *sql.Tx, r Record) error
}
