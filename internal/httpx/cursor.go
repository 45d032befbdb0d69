package httpx

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"time"
)

// Cursor is a position in a list ordered by "created_at DESC, id DESC"
// (C-16): the next page holds the rows that come after (CreatedAt, ID).
type Cursor struct {
	CreatedAt time.Time
	ID        string
}

// The encoded cursor is base64url without padding of:
//
//	version (1 byte) | SHA-256 of the binding, first 16 bytes |
//	seconds since 1970 (8 bytes, big endian, two's complement) |
//	nanoseconds (4 bytes, big endian) | ID (16 bytes)
const (
	cursorVersion    = 1
	cursorBindingLen = 16
	cursorLen        = 1 + cursorBindingLen + 8 + 4 + 16
)

// cursorEncoding is strict so that every cursor has exactly one spelling.
var cursorEncoding = base64.RawURLEncoding.Strict()

// EncodeCursor returns the opaque cursor for position c in the list that
// binding describes. The binding names everything that shaped the list, for
// example "subscriptions|<credential id>|<namespace id>|queue=<id>"; only a
// digest of it is stored in the cursor. c.ID must be a valid ID (C-11); an
// invalid one is a bug and makes EncodeCursor panic.
//
// A cursor is not signed: a client can make up any position, but it is
// only ever used inside the scope of its own credential.
func EncodeCursor(binding string, c Cursor) string {
	if !ValidID(c.ID) {
		panic("httpx: EncodeCursor: cursor ID is not a valid ID")
	}
	id, _ := hex.DecodeString(c.ID)
	b := make([]byte, 0, cursorLen)
	b = append(b, cursorVersion)
	sum := sha256.Sum256([]byte(binding))
	b = append(b, sum[:cursorBindingLen]...)
	b = binary.BigEndian.AppendUint64(b, uint64(c.CreatedAt.Unix()))
	b = binary.BigEndian.AppendUint32(b, uint32(c.CreatedAt.Nanosecond()))
	b = append(b, id...)
	return cursorEncoding.EncodeToString(b)
}

// DecodeCursor returns the position held by cursor s, which must have been
// made by EncodeCursor with the same binding. A malformed cursor, or one
// that belongs to another list, is a 400 INVALID_ARGUMENT *Error.
// The time is returned in UTC.
func DecodeCursor(s string, binding string) (Cursor, error) {
	b, err := cursorEncoding.DecodeString(s)
	if err != nil || len(b) != cursorLen || b[0] != cursorVersion {
		return Cursor{}, &Error{Code: CodeInvalidArgument, Message: "cursor is malformed"}
	}
	sum := sha256.Sum256([]byte(binding))
	if subtle.ConstantTimeCompare(b[1:1+cursorBindingLen], sum[:cursorBindingLen]) != 1 {
		return Cursor{}, &Error{Code: CodeInvalidArgument, Message: "cursor does not belong to this list"}
	}
	rest := b[1+cursorBindingLen:]
	sec := int64(binary.BigEndian.Uint64(rest[:8]))
	nsec := binary.BigEndian.Uint32(rest[8:12])
	if nsec >= uint32(time.Second) || sec < minCursorSeconds || sec > maxCursorSeconds {
		return Cursor{}, &Error{Code: CodeInvalidArgument, Message: "cursor is malformed"}
	}
	return Cursor{
		CreatedAt: time.Unix(sec, int64(nsec)).UTC(),
		ID:        hex.EncodeToString(rest[12:]),
	}, nil
}

// A cursor's time must lie within the years 1 to 9999: the database driver
// refuses any other time as a query argument, so an edited cursor outside
// them would otherwise fail the query instead of being a 400.
var (
	minCursorSeconds = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	maxCursorSeconds = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Unix()
)
