// Package resultinbox is the result-inbox example: the receiver's schema,
// the Inbox store (package inbox), the receiver commands (package receiver)
// and their binary (cmd/receiver).
package resultinbox

import _ "embed"

// Schema is schema.sql, the receiver's initial DDL.
//
//go:embed schema.sql
var Schema string
