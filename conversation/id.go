package conversation

import (
	"crypto/rand"
	"encoding/binary"
	"strings"
	"sync"
	"time"
)

// Id layout; see NewID.
const (
	idPrefix   = "c"
	idTimeLen  = 10
	idRandLen  = 12
	idLen      = len(idPrefix) + idTimeLen + idRandLen
	idAlphabet = "0123456789abcdefghjkmnpqrstvwxyz"
	idRandMask = 1<<(5*idRandLen) - 1
	idTimeMax  = 1<<(5*idTimeLen) - 1
	maxIDLen   = 128
)

// idGen makes ids that increase strictly, whatever the clock does.
type idGen struct {
	mu   sync.Mutex
	ms   int64
	rand uint64
}

var ids idGen

// NewID returns a new outpost conversation id: "c" followed by 22 characters of lowercase
// Crockford base32 (digits and letters without i, l, o, u): 10 characters
// of the creation time in milliseconds since the Unix epoch (50 bits, good
// until the year 37000) and 12 characters (60 bits) holding a random
// number below 2^59 from crypto/rand. For example "c01m8mee887deapmgz08rxq".
//
// Ids are URL and file-name safe, case-insensitive-filesystem safe (one
// case only), and sort as strings in creation order at millisecond
// precision. Within one process they are strictly increasing: ids made in
// the same millisecond increment the random part. Across processes and
// machines they are unique with overwhelming probability (59 random bits
// per millisecond).
//
// NewID is safe for concurrent use and never fails.
func NewID() string { return ids.next(time.Now()) }

func (g *idGen) next(t time.Time) string {
	ms := min(max(t.UnixMilli(), 0), idTimeMax)
	g.mu.Lock()
	defer g.mu.Unlock()
	var r uint64
	switch {
	case ms <= g.ms && g.rand < idRandMask:
		// Same millisecond (or a clock that went back): stay after the
		// previous id.
		ms, r = g.ms, g.rand+1
	case ms <= g.ms:
		ms, r = g.ms+1, randBits()
	default:
		r = randBits()
	}
	g.ms, g.rand = ms, r
	var b [idLen]byte
	copy(b[:], idPrefix)
	encodeBase32(b[len(idPrefix):len(idPrefix)+idTimeLen], uint64(ms))
	encodeBase32(b[len(idPrefix)+idTimeLen:], r)
	return string(b[:])
}

// randBits returns 60 random bits, leaving room below idRandMask so that
// increments within a millisecond rarely overflow.
func randBits() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand crashes the program instead)
	return binary.BigEndian.Uint64(b[:]) & (idRandMask >> 1)
}

// encodeBase32 writes v into dst as big-endian base32 digits.
func encodeBase32(dst []byte, v uint64) {
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = idAlphabet[v&31]
		v >>= 5
	}
}

// ValidID reports whether id can name a stored conversation: 1 to 128
// characters of lowercase letters, digits, '-' and '_', starting with a
// letter or digit. NewID's ids are valid; so are ids of other origins that
// follow these rules (an imported conversation keeps its id).
func ValidID(id string) bool {
	if id == "" || len(id) > maxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '-' || c == '_') && i > 0:
		default:
			return false
		}
	}
	return true
}

// IDTime returns the creation time encoded in an id made by NewID, at
// millisecond precision, and false for ids of another shape.
func IDTime(id string) (time.Time, bool) {
	if len(id) != idLen || id[:len(idPrefix)] != idPrefix {
		return time.Time{}, false
	}
	var ms uint64
	for i := len(idPrefix); i < idLen; i++ {
		d := strings.IndexByte(idAlphabet, id[i])
		if d < 0 {
			return time.Time{}, false
		}
		if i < len(idPrefix)+idTimeLen {
			ms = ms<<5 | uint64(d)
		}
	}
	return time.UnixMilli(int64(ms)), true
}
