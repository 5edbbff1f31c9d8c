package bootstrap

import (
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
)

// Digest is a SHA-512 digest, the only algorithm pins accept.
type Digest [sha512.Size]byte

// ParseIntegrity reads npm's subresource-integrity form of a SHA-512
// digest, "sha512-<base64>". A string listing several hashes (separated
// by spaces) is accepted when one of them is SHA-512; weaker ones are
// ignored.
func ParseIntegrity(s string) (Digest, error) {
	for _, f := range strings.Fields(s) {
		b64, ok := strings.CutPrefix(f, "sha512-")
		if !ok {
			continue
		}
		if i := strings.IndexByte(b64, '?'); i >= 0 {
			b64 = b64[:i] // SRI options
		}
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return Digest{}, fmt.Errorf("integrity %q: %w", s, err)
		}
		if len(raw) != sha512.Size {
			return Digest{}, fmt.Errorf("integrity %q: %d bytes, want %d", s, len(raw), sha512.Size)
		}
		return Digest(raw), nil
	}
	return Digest{}, fmt.Errorf("integrity %q: no sha512- hash", s)
}

// ParseHex reads a SHA-512 digest written as 128 hexadecimal digits.
func ParseHex(s string) (Digest, error) {
	raw, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return Digest{}, fmt.Errorf("sha512 %q: %w", s, err)
	}
	if len(raw) != sha512.Size {
		return Digest{}, fmt.Errorf("sha512 %q: %d hex digits, want %d", s, 2*len(raw), 2*sha512.Size)
	}
	return Digest(raw), nil
}

// SRI is the digest in npm's integrity form, "sha512-<base64>".
func (d Digest) SRI() string { return "sha512-" + base64.StdEncoding.EncodeToString(d[:]) }

// Hex is the digest as 128 lowercase hexadecimal digits.
func (d Digest) Hex() string { return hex.EncodeToString(d[:]) }

// String is the SRI form.
func (d Digest) String() string { return d.SRI() }

// key names the digest in the cache: "sha512-<hex>", safe in a file name
// on every filesystem (base64 has '/').
func (d Digest) key() string { return "sha512-" + d.Hex() }
