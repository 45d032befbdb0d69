// Package db is Orbit's storage kit: it opens MySQL connection pools with the
// session settings every store relies on and runs transactions.
//
// Every connection Open makes uses UTC (time_zone '+00:00', times scanned as
// UTC time.Time) and READ COMMITTED isolation. Tx retries a transaction that
// lost a deadlock or timed out waiting for a lock, and reports a commit whose
// outcome is unknown as ErrCommitUnknown. Stores write their own SQL; this
// package has no query builder.
//
// OpenList takes the DSNs of several servers of one database (the nodes of
// a Galera cluster) and moves new connections to the next one when a dial
// fails; see Connector.
//
// IDs are 32 lowercase hex characters (NewID) and times are UTC with
// microsecond precision (Now), matching DATETIME(6) columns.
package db
