package checkpoint

import (
	"bytes"
	"math"
	"strings"
)

// Merge3 merges the change from base to theirs into ours, line by line, as
// git's merge does (diff3 semantics): a region only one side changed takes
// that side's version, a region both sides changed the same way takes it
// once. conflicts counts the regions the two sides changed differently,
// where their changes overlap or touch (git counts adjacent changes as a
// conflict too); merged then holds the result with git-style conflict
// markers (<<<<<<< ours, =======, >>>>>>> theirs; lines both sides begin
// or end a conflict with are written once, outside them), with "\r\n"
// line ends when ours' lines end so, for a caller to show.
//
// When ours equals theirs, or theirs equals base, merged is ours; when ours
// equals base, merged is theirs; merged may then share memory with that
// argument. Otherwise, when any of the three is binary (IsBinary), the
// result is one conflict with merged nil. Lines are compared with their
// "\n" (a "\r\n" line ends in "\r\n", so a file whose line endings were
// converted changed every line), so a missing final newline is kept, and
// adding or removing one changes the last line.
func Merge3(base, ours, theirs []byte) (merged []byte, conflicts int) {
	switch {
	case bytes.Equal(ours, theirs), bytes.Equal(theirs, base):
		return ours, 0
	case bytes.Equal(ours, base):
		return theirs, 0
	case IsBinary(base) || IsBinary(ours) || IsBinary(theirs):
		return nil, 1
	}
	return mergeLines(base, ours, theirs)
}

// binarySniff is how much of a file IsBinary looks at, as git does.
const binarySniff = 8000

// IsBinary reports whether data looks binary: a NUL byte in its first 8000
// bytes, as git decides.
func IsBinary(data []byte) bool {
	return bytes.IndexByte(data[:min(len(data), binarySniff)], 0) >= 0
}

// mergeLines is Merge3's line merge, without its shortcuts. A base line
// the diffs to both sides keep is stable; between two stable lines (and
// before the first and after the last) lies a chunk, which merger.chunk
// resolves.
func mergeLines(base, ours, theirs []byte) ([]byte, int) {
	b, o, t := splitLines(base), splitLines(ours), splitLines(theirs)
	ids, n := internLines(b, o, t)
	mo, mt := matchLines(ids[0], ids[1], n), matchLines(ids[0], ids[2], n)
	w := &merger{out: make([]byte, 0, max(len(ours), len(theirs))), eol: markerEOL(o)}
	i0, j0, k0 := 0, 0, 0
	for i := 0; i <= len(b); i++ {
		j, k := len(o), len(t)
		if i < len(b) {
			if j, k = mo[i], mt[i]; j < 0 || k < 0 {
				continue
			}
		}
		w.chunk(b[i0:i], o[j0:j], t[k0:k])
		if i == len(b) {
			break
		}
		w.lines(o[j : j+1])
		i0, j0, k0 = i+1, j+1, k+1
	}
	return w.out, w.conflicts
}

// splitLines splits data after each "\n"; a last line without one is kept
// as it is.
func splitLines(data []byte) []string {
	if len(data) == 0 {
		return nil
	}
	ls := strings.SplitAfter(string(data), "\n")
	if ls[len(ls)-1] == "" {
		ls = ls[:len(ls)-1]
	}
	return ls
}

// internLines numbers the distinct lines of files, so that the diff compares
// numbers; it returns each file's lines as numbers and how many there are.
func internLines(files ...[]string) ([][]int, int) {
	ids := make(map[string]int)
	out := make([][]int, len(files))
	for f, ls := range files {
		out[f] = make([]int, len(ls))
		for i, l := range ls {
			id, ok := ids[l]
			if !ok {
				id = len(ids)
				ids[l] = id
			}
			out[f][i] = id
		}
	}
	return out, len(ids)
}

// markerEOL is the line ending of conflict markers: "\r\n" when every
// line of ours that ends ends so, as git does for a CRLF file.
func markerEOL(ours []string) string {
	crlf := false
	for _, l := range ours {
		switch {
		case strings.HasSuffix(l, "\r\n"):
			crlf = true
		case strings.HasSuffix(l, "\n"):
			return "\n"
		}
	}
	if crlf {
		return "\r\n"
	}
	return "\n"
}

// merger accumulates mergeLines' output.
type merger struct {
	out       []byte
	eol       string // of conflict markers
	conflicts int
}

// lines appends ls to the output.
func (w *merger) lines(ls []string) {
	for _, l := range ls {
		w.out = append(w.out, l...)
	}
}

// chunk resolves a region between stable lines, given as base's, ours'
// and theirs' lines: the side that changed it wins, an identical change
// is taken once, and different changes conflict.
func (w *merger) chunk(b, o, t []string) {
	switch {
	case equalLines(o, b):
		w.lines(t)
	case equalLines(t, b), equalLines(o, t):
		w.lines(o)
	default:
		w.conflict(o, t)
	}
}

// conflict writes a conflicting chunk between markers; the lines both
// sides begin or end it with are written once, outside the markers, as
// git's merge does.
func (w *merger) conflict(o, t []string) {
	p := 0
	for p < len(o) && p < len(t) && o[p] == t[p] {
		p++
	}
	s := 0
	for s < len(o)-p && s < len(t)-p && o[len(o)-1-s] == t[len(t)-1-s] {
		s++
	}
	w.lines(o[:p])
	w.marker("<<<<<<< ours")
	w.lines(o[p : len(o)-s])
	w.marker("=======")
	w.lines(t[p : len(t)-s])
	w.marker(">>>>>>> theirs")
	w.lines(o[len(o)-s:])
	w.conflicts++
}

// marker writes a conflict marker on a line of its own, ending the line
// before it when that was a file's last line without a newline.
func (w *merger) marker(m string) {
	if len(w.out) > 0 && w.out[len(w.out)-1] != '\n' {
		w.out = append(w.out, w.eol...)
	}
	w.out = append(w.out, m...)
	w.out = append(w.out, w.eol...)
}

// equalLines reports whether a and b are the same lines.
func equalLines(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// matchLines diffs a against b (lines numbered by internLines, n of them) and
// returns, for each line of a, the index of the line of b the diff keeps
// it as, or -1 when the diff deletes it. Lines that occur in only one of
// the two cannot be kept and are left out before the diff, as git's xdiff
// does; what remains is diffed by Myers' algorithm, in linear space, with
// xdiff's cost limit: a split that takes more than max(256, √(N+M)) edit
// steps to find settles for the furthest point reached, so a diff of two
// long, much different files with many repeated lines takes O((N+M)·limit)
// time rather than O((N+M)·D), and may keep fewer lines than it could.
func matchLines(a, b []int, n int) []int {
	inA, inB := make([]bool, n), make([]bool, n)
	for _, x := range a {
		inA[x] = true
	}
	for _, x := range b {
		inB[x] = true
	}
	fa, ia := sharedLines(a, inB)
	fb, ib := sharedLines(b, inA)
	match := make([]int, len(a))
	for i := range match {
		match[i] = -1
	}
	limit := max(256, int(math.Sqrt(float64(len(fa)+len(fb)))))
	for i, j := range myersDiff(fa, fb, limit) {
		if j >= 0 {
			match[ia[i]] = ib[j]
		}
	}
	return match
}

// sharedLines returns the lines of a that in marks, with their indices in a.
func sharedLines(a []int, in []bool) (lines, index []int) {
	for i, x := range a {
		if in[x] {
			lines, index = append(lines, x), append(index, i)
		}
	}
	return lines, index
}

// myers is a minimal diff of a against b in progress (E. W. Myers, "An
// O(ND) Difference Algorithm and Its Variations", 1986, with the linear
// space refinement): the box a[aLo:aHi] × b[bLo:bHi] being split, the
// furthest x reached on each diagonal forward (vf) and backward (vb),
// match as matchLines returns it, and the edit steps a split may take.
type myers struct {
	a, b               []int
	aLo, aHi, bLo, bHi int
	vf, vb             []int
	match              []int
	limit              int
}

// myersDiff returns, for each element of a, the index of the element of b
// a diff keeps it as, or -1; the diff is minimal unless a split takes more
// than limit edit steps.
func myersDiff(a, b []int, limit int) []int {
	c := (len(a)+len(b)+1)/2 + 2
	d := &myers{a: a, b: b, vf: make([]int, 2*c+1), vb: make([]int, 2*c+1), match: make([]int, len(a)), limit: limit}
	for i := range d.match {
		d.match[i] = -1
	}
	d.compare(0, len(a), 0, len(b))
	return d.match
}

// compare diffs a[aLo:aHi] against b[bLo:bHi]: it keeps their common
// prefix and suffix, then splits what is left at a middle snake of an
// optimal edit path and compares the two halves.
func (d *myers) compare(aLo, aHi, bLo, bHi int) {
	for aLo < aHi && bLo < bHi && d.a[aLo] == d.b[bLo] {
		d.match[aLo] = bLo
		aLo, bLo = aLo+1, bLo+1
	}
	for aLo < aHi && bLo < bHi && d.a[aHi-1] == d.b[bHi-1] {
		aHi, bHi = aHi-1, bHi-1
		d.match[aHi] = bHi
	}
	if aLo == aHi || bLo == bHi {
		return
	}
	x, y, u, v := d.split(aLo, aHi, bLo, bHi)
	for i := x; i < u; i++ {
		d.match[i] = y + i - x
	}
	d.compare(aLo, x, bLo, y)
	d.compare(u, aHi, v, bHi)
}

// split finds the middle snake of an optimal edit path through the box
// a[aLo:aHi] × b[bLo:bHi], which has neither a common first nor a common
// last element: it searches forward from the start and backward from the
// end, one edit step at a time, until the two searches meet on a
// diagonal. The snake runs from (x, y) to (u, v). Past d.limit steps it
// splits, with no snake, at the furthest point either search reached.
func (d *myers) split(aLo, aHi, bLo, bHi int) (x, y, u, v int) {
	d.aLo, d.aHi, d.bLo, d.bHi = aLo, aHi, bLo, bHi
	n, m := aHi-aLo, bHi-bLo
	delta, c := n-m, len(d.vf)/2
	for e := 0; e <= (n+m+1)/2; e++ {
		for k := -e; k <= e; k += 2 {
			x0, x1 := d.reach(d.vf, k, e, false)
			if kb := delta - k; delta%2 != 0 && x1 >= 0 && -e < kb && kb < e && d.vb[c+kb] >= 0 && x1+d.vb[c+kb] >= n {
				return aLo + x0, bLo + x0 - k, aLo + x1, bLo + x1 - k
			}
		}
		for k := -e; k <= e; k += 2 {
			x0, x1 := d.reach(d.vb, k, e, true)
			if kf := delta - k; delta%2 == 0 && x1 >= 0 && -e <= kf && kf <= e && d.vf[c+kf] >= 0 && x1+d.vf[c+kf] >= n {
				return aHi - x1, bHi - x1 + k, aHi - x0, bHi - x0 + k
			}
		}
		if e >= d.limit {
			x, y = d.furthest(e)
			return x, y, x, y
		}
	}
	panic("checkpoint: the diff found no middle snake")
}

// reach takes the search of diagonal k (x-y, counted from the search's
// own corner, backward when back) to edit step e, from the furthest
// points of step e-1 on the diagonals either side, staying inside the
// box, and follows the snake of equal elements from there. It returns
// where the snake starts and ends, as x, or -1 when no path of e edits
// reaches the diagonal.
func (d *myers) reach(v []int, k, e int, back bool) (x0, x1 int) {
	n, m, c := d.aHi-d.aLo, d.bHi-d.bLo, len(v)/2
	x := -1
	switch {
	case e == 0:
		x = 0
	default:
		if down := v[c+k+1]; k < e && down >= 0 && down-k <= m {
			x = down
		}
		if right := v[c+k-1]; k > -e && right >= 0 && right < n && right+1 > x {
			x = right + 1
		}
	}
	x0 = x
	for x >= 0 && x < n && x-k < m && d.same(x, x-k, back) {
		x++
	}
	v[c+k] = x
	return x0, x
}

// furthest returns the point, inside the box, that the forward or the
// backward search got furthest from its corner to after e edit steps.
// That is neither corner: at least e from its own, and had a search
// reached the other, the two would have met.
func (d *myers) furthest(e int) (x, y int) {
	c, best := len(d.vf)/2, -1
	for k := -e; k <= e; k += 2 {
		if f := d.vf[c+k]; f >= 0 && 2*f-k > best {
			best, x, y = 2*f-k, d.aLo+f, d.bLo+f-k
		}
		if b := d.vb[c+k]; b >= 0 && 2*b-k > best {
			best, x, y = 2*b-k, d.aHi-b, d.bHi-b+k
		}
	}
	return x, y
}

// same reports whether the x-th element of a equals the y-th of b, counted
// from the box's start, or from its end when back.
func (d *myers) same(x, y int, back bool) bool {
	if back {
		return d.a[d.aHi-1-x] == d.b[d.bHi-1-y]
	}
	return d.a[d.aLo+x] == d.b[d.bLo+y]
}
