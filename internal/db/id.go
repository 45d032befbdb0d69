package db

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// NewID returns a new random ID: 128 bits from crypto/rand as 32 lowercase
// hex characters, the form every ID column stores.
func NewID() string {
	var b [16]byte
	rand.Read(b[:]) // never returns an error; it crashes the program instead
	return hex.EncodeToString(b[:])
}

// Now returns the current time in UTC truncated to microseconds, the
// precision of DATETIME(6), so a time written and read back compares equal.
func Now() time.Time {
	return time.Now().UTC().Truncate(time.Microsecond)
}
