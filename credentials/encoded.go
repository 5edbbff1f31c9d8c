package credentials

import (
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"strings"
)

// minFormLen is the shortest encoded form redaction looks for: a shorter
// one (the shifted base64 of a four-byte secret) would match unrelated
// base64 text too often, and the secret it stands for protects little.
const minFormLen = 8

// encodedForms returns the encoded forms of p that a Redactor also finds,
// so a secret an agent prints through base64, hex or percent-encoding is
// still redacted:
//
//   - base64, standard and URL alphabets, with and without padding, and the
//     characters that stand for p alone wherever p sits inside a longer
//     base64 text (p starting at a byte offset of 0, 1 or 2 modulo 3: the
//     characters mixed with neighbouring bytes are left out);
//   - hex, lower- and upper-case;
//   - percent-encoding as url.QueryEscape and url.PathEscape write it, with
//     upper- and lower-case hex digits.
//
// Forms shorter than minFormLen and forms equal to p are left out by the
// caller. What redaction cannot catch is listed in docs/security.md.
func encodedForms(p string) []string {
	b := []byte(p)
	var out []string
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		out = append(out, enc.EncodeToString(b))
		raw := enc.WithPadding(base64.NoPadding)
		out = append(out, raw.EncodeToString(b))
		for off := range 3 {
			out = append(out, base64Core(raw, b, off))
		}
	}
	h := hex.EncodeToString(b)
	out = append(out, h, strings.ToUpper(h))
	for _, e := range []string{url.QueryEscape(p), url.PathEscape(p)} {
		out = append(out, e, lowerEscapes(e))
	}
	var keep []string
	for _, f := range out {
		if len(f) >= minFormLen && f != p {
			keep = append(keep, f)
		}
	}
	return keep
}

// base64Core returns the base64 characters (enc, unpadded) that depend on
// b alone when b starts off bytes (0, 1 or 2) past a 3-byte boundary of a
// longer encoded text: the characters that also carry bits of the bytes
// before or after b are dropped.
func base64Core(enc *base64.Encoding, b []byte, off int) string {
	n := off + len(b)
	buf := make([]byte, n)
	copy(buf[off:], b)
	s := enc.EncodeToString(buf)
	skip := [3]int{0, 2, 3}[off]
	end := n/3*4 + n%3
	if end <= skip {
		return ""
	}
	return s[skip:end]
}

// lowerEscapes returns s with the hex digits of its %XX escapes in lower
// case.
func lowerEscapes(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1] = lowerHex(b[i+1])
			b[i+2] = lowerHex(b[i+2])
			i += 2
		}
	}
	return string(b)
}

func lowerHex(c byte) byte {
	if 'A' <= c && c <= 'F' {
		return c + 'a' - 'A'
	}
	return c
}
