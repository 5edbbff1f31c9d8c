package credentials

// MaskByte replaces each byte of a secret in Mask's output.
const MaskByte = '*'

// Mask returns b with every byte of every occurrence of a secret replaced
// by MaskByte: the result has b's length, so a file keeps its size, its
// offsets and its syntax (a secret inside a JSON string stays a valid JSON
// string), and the CLI that wrote it can still read it. Each secret is
// also found in the forms encoding/json and ensure_ascii encoders write it
// in (escaped quotes, backslashes, HTML characters, \u escapes). When no
// secret occurs it returns b itself; otherwise a new slice (b is never
// modified). The engine masks captured conversation files with it before
// they are stored.
func (r *Redactor) Mask(b []byte) []byte {
	s := r.load()
	if s.empty() || len(b) < MinSecretLen {
		return b
	}
	sp := find(s.fm, b)
	if len(sp) == 0 {
		return b
	}
	out := make([]byte, len(b))
	copy(out, b)
	for _, x := range sp {
		for i := x.start; i < x.end; i++ {
			out[i] = MaskByte
		}
	}
	return out
}
