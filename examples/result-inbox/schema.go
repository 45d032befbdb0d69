// Package resultinbox is the result-inbox example: the receiver's schema,
// the Inbox store (package inbox), the receiver commands (package receiver)
// and their binary (cmd/receiver).
package resultinbox

import _ "embed"

// Schema is schema.sql, the receiver's DDL: one CREATE TABLE per table, in
// the order of SchemaGenerations.
//
//go:embed schema.sql
var Schema string

// SchemaGenerations lists, in order, the tables each generation of the
// receiver's schema added: generation 1 is the Inbox and the task view
// generation 2 the ACK intents (K-13). A receiver database holds
// exactly the tables of the first n generations; `receiver init` creates
// the tables of the generations after n.
var SchemaGenerations = [][]string{
	{"receiver_inbox", "receiver_task_views"},
	{"receiver_ack_intents"},
}
