package checkpoint

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Conflict markers as Merge3 writes them in a file of "\n" lines.
const (
	merge3Ours   = "<<<<<<< ours\n"
	merge3Sep    = "=======\n"
	merge3Theirs = ">>>>>>> theirs\n"
)

// merge3Cases are TestMerge3's.
var merge3Cases = []struct {
	name               string
	base, ours, theirs string
	want               string
	conflicts          int
}{
	{name: "nothing changed", base: "a\n", ours: "a\n", theirs: "a\n", want: "a\n"},
	{name: "only theirs changed", base: "a\nb\n", ours: "a\nb\n", theirs: "a\nB\n", want: "a\nB\n"},
	{name: "only ours changed", base: "a\nb\n", ours: "A\nb\n", theirs: "a\nb\n", want: "A\nb\n"},
	{name: "both changed to the same", base: "a\nb\n", ours: "a\nB\n", theirs: "a\nB\n", want: "a\nB\n"},
	{
		name: "edits apart merge",
		base: "a\nb\nc\nd\ne\n", ours: "A\nb\nc\nd\ne\n", theirs: "a\nb\nc\nd\nE\n",
		want: "A\nb\nc\nd\nE\n",
	},
	{
		name: "edits one line apart merge",
		base: "a\nb\nc\n", ours: "A\nb\nc\n", theirs: "a\nb\nC\n",
		want: "A\nb\nC\n",
	},
	{
		name: "same edit both sides, taken once",
		base: "1\n2\n3\n4\n5\n6\n7\n", ours: "one\n2\n3\nfour\n5\n6\n7\n", theirs: "1\n2\n3\nfour\n5\n6\nseven\n",
		want: "one\n2\n3\nfour\n5\n6\nseven\n",
	},
	{
		name: "same insertion both sides",
		base: "a\nb\n", ours: "a\nx\nb\nc\n", theirs: "a\nx\nb\n",
		want: "a\nx\nb\nc\n",
	},
	{
		name: "overlapping edits conflict",
		base: "a\nb\nc\n", ours: "a\nX\nc\n", theirs: "a\nY\nc\n",
		want: "a\n" + merge3Ours + "X\n" + merge3Sep + "Y\n" + merge3Theirs + "c\n", conflicts: 1,
	},
	{
		name: "adjacent edits conflict",
		base: "a\nb\nc\nd\n", ours: "a\nB\nc\nd\n", theirs: "a\nb\nC\nd\n",
		want: "a\n" + merge3Ours + "B\nc\n" + merge3Sep + "b\nC\n" + merge3Theirs + "d\n", conflicts: 1,
	},
	{
		name: "two conflicts",
		base: "1\n2\n3\n4\n5\n6\n7\n", ours: "1\nb\n3\n4\n5\nf\n7\n", theirs: "one\nB\n3\n4\n5\nF\n7\n",
		want: merge3Ours + "1\nb\n" + merge3Sep + "one\nB\n" + merge3Theirs + "3\n4\n5\n" + merge3Ours + "f\n" + merge3Sep + "F\n" + merge3Theirs + "7\n", conflicts: 2,
	},
	{
		name: "lines both sides begin and end a conflict with are kept outside",
		base: "a\nb\nz\n", ours: "a\nkeep\nX\nend\nz\n", theirs: "a\nkeep\nY\nend\nz\n",
		want: "a\nkeep\n" + merge3Ours + "X\n" + merge3Sep + "Y\n" + merge3Theirs + "end\nz\n", conflicts: 1,
	},
	{
		name: "insertions at start and end",
		base: "a\nb\n", ours: "x\na\nb\n", theirs: "a\nb\ny\n",
		want: "x\na\nb\ny\n",
	},
	{
		name: "different insertions at start conflict",
		base: "a\n", ours: "x\na\n", theirs: "y\na\n",
		want: merge3Ours + "x\n" + merge3Sep + "y\n" + merge3Theirs + "a\n", conflicts: 1,
	},
	{
		name: "different insertions at end conflict",
		base: "a\n", ours: "a\nx\n", theirs: "a\ny\n",
		want: "a\n" + merge3Ours + "x\n" + merge3Sep + "y\n" + merge3Theirs, conflicts: 1,
	},
	{
		name: "deletion and edit elsewhere",
		base: "a\nb\nc\nd\n", ours: "b\nc\nd\n", theirs: "a\nb\nc\nD\n",
		want: "b\nc\nD\n",
	},
	{
		name: "deletions both sides",
		base: "a\nb\nc\nd\n", ours: "b\nc\nd\n", theirs: "a\nb\nc\n",
		want: "b\nc\n",
	},
	{
		name: "adjacent deletions conflict",
		base: "a\nb\n", ours: "b\n", theirs: "a\n",
		want: merge3Ours + "b\n" + merge3Sep + "a\n" + merge3Theirs, conflicts: 1,
	},
	{
		name: "deletion against edit conflicts",
		base: "a\nb\nc\n", ours: "a\nc\n", theirs: "a\nB\nc\n",
		want: "a\n" + merge3Ours + merge3Sep + "B\n" + merge3Theirs + "c\n", conflicts: 1,
	},
	{
		name: "edit against deletion conflicts",
		base: "a\nb\nc\n", ours: "a\nB\nc\n", theirs: "a\nc\n",
		want: "a\n" + merge3Ours + "B\n" + merge3Sep + merge3Theirs + "c\n", conflicts: 1,
	},
	{
		name: "both created from an empty base",
		base: "", ours: "package x\n\nfunc A() {}\n", theirs: "package x\n\nfunc B() {}\n",
		want: "package x\n\n" + merge3Ours + "func A() {}\n" + merge3Sep + "func B() {}\n" + merge3Theirs, conflicts: 1,
	},
	{
		name: "both created the same from an empty base",
		base: "", ours: "x\n", theirs: "x\n",
		want: "x\n",
	},
	{
		name: "no trailing newline kept",
		base: "a\nb\nc", ours: "A\nb\nc", theirs: "a\nb\nC",
		want: "A\nb\nC",
	},
	{
		name: "trailing newline removed by ours",
		base: "a\nb\nc\n", ours: "a\nb\nc", theirs: "A\nb\nc\n",
		want: "A\nb\nc",
	},
	{
		name: "trailing newline added by theirs",
		base: "a\nb\nc", ours: "A\nb\nc", theirs: "a\nb\nc\n",
		want: "A\nb\nc\n",
	},
	{
		name: "conflict at an end without newline",
		base: "a\nb", ours: "a\nX", theirs: "a\nY",
		want: "a\n" + merge3Ours + "X\n" + merge3Sep + "Y\n" + merge3Theirs, conflicts: 1,
	},
	{
		name: "CRLF edits apart",
		base: "a\r\nb\r\nc\r\n", ours: "A\r\nb\r\nc\r\n", theirs: "a\r\nb\r\nC\r\n",
		want: "A\r\nb\r\nC\r\n",
	},
	{
		name: "CRLF conflict has CRLF markers",
		base: "a\r\nb\r\n", ours: "a\r\nX\r\n", theirs: "a\r\nY", conflicts: 1,
		want: "a\r\n<<<<<<< ours\r\nX\r\n=======\r\nY\r\n>>>>>>> theirs\r\n",
	},
	{
		name: "CRLF made LF changes every line",
		base: "a\r\nb\r\n", ours: "a\nb\n", theirs: "a\r\nB\r\n",
		want: merge3Ours + "a\nb\n" + merge3Sep + "a\r\nB\r\n" + merge3Theirs, conflicts: 1,
	},
}

func TestMerge3(t *testing.T) {
	for _, tt := range merge3Cases {
		t.Run(tt.name, func(t *testing.T) {
			got, n := Merge3([]byte(tt.base), []byte(tt.ours), []byte(tt.theirs))
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("Merge3 merged (-want +got):\n%s", diff)
			}
			if n != tt.conflicts {
				t.Errorf("Merge3 conflicts = %d, want %d", n, tt.conflicts)
			}
			if _, rn := Merge3([]byte(tt.base), []byte(tt.theirs), []byte(tt.ours)); rn != n {
				t.Errorf("Merge3 with the sides swapped: %d conflicts, want %d", rn, n)
			}
		})
	}
}

func TestMerge3Binary(t *testing.T) {
	bin := func(s string) []byte { return []byte("\x00" + s) }
	tests := []struct {
		name               string
		base, ours, theirs []byte
		want               []byte
		conflicts          int
	}{
		{name: "only theirs changed", base: bin("a"), ours: bin("a"), theirs: bin("b"), want: bin("b")},
		{name: "only ours changed", base: bin("a"), ours: bin("b"), theirs: bin("a"), want: bin("b")},
		{name: "both changed the same", base: bin("a"), ours: bin("b"), theirs: bin("b"), want: bin("b")},
		{name: "both changed", base: bin("a"), ours: bin("b"), theirs: bin("c"), conflicts: 1},
		{name: "text made binary", base: []byte("a\n"), ours: []byte("b\n"), theirs: bin("c\n"), conflicts: 1},
		{name: "binary made text", base: bin("a\n"), ours: []byte("a\nb\n"), theirs: []byte("c\na\n"), conflicts: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, n := Merge3(tt.base, tt.ours, tt.theirs)
			if !bytes.Equal(got, tt.want) || (tt.want == nil) != (got == nil) || n != tt.conflicts {
				t.Errorf("Merge3 = %q, %d; want %q, %d", got, n, tt.want, tt.conflicts)
			}
		})
	}
}

func TestIsBinary(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		want bool
	}{
		{name: "nil", data: nil},
		{name: "text", data: []byte("hello\nworld\r\n")},
		{name: "UTF-8", data: []byte("héllo wörld ✓\n")},
		{name: "NUL first", data: []byte("\x00abc"), want: true},
		{name: "NUL at 7999", data: append(bytes.Repeat([]byte("a"), 7999), 0), want: true},
		{name: "NUL at 8000 not looked at", data: append(bytes.Repeat([]byte("a"), 8000), 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsBinary(tt.data); got != tt.want {
				t.Errorf("IsBinary = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestMerge3Diff checks the line diff under the merge: valid and minimal.
func TestMerge3Diff(t *testing.T) {
	tests := []struct{ name, a, b string }{
		{name: "empty", a: "", b: ""},
		{name: "one empty", a: "abc", b: ""},
		{name: "other empty", a: "", b: "abc"},
		{name: "equal", a: "abcabc", b: "abcabc"},
		{name: "Myers' example", a: "abcabba", b: "cbabac"},
		{name: "reversed", a: "abcdefgh", b: "hgfedcba"},
		{name: "odd delta", a: "xaybzc", b: "abcq"},
		{name: "repeats", a: "aaaabaaaa", b: "aabaaaaaaa"},
		{name: "moved block", a: "abcdefghij", b: "fghijabcde"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkLineDiff(t, diffElems(tt.a), diffElems(tt.b), 1000)
			checkLineDiff(t, diffElems(tt.a), diffElems(tt.b), 1)
		})
	}
}

// diffElems numbers the characters of s, as intern numbers lines.
func diffElems(s string) []int {
	var out []int
	for _, r := range s {
		out = append(out, int(r))
	}
	return out
}

// checkLineDiff checks that myersDiff (with limit) and matchLines keep equal
// elements in order, and that they keep as many as a longest common
// subsequence has when a and b are too short for the limit to matter.
func checkLineDiff(t *testing.T, a, b []int, limit int) {
	t.Helper()
	n := 0
	for _, x := range append(append([]int(nil), a...), b...) {
		n = max(n, x+1)
	}
	for name, match := range map[string][]int{"myersDiff": myersDiff(a, b, limit), "matchLines": matchLines(a, b, n)} {
		if len(match) != len(a) {
			t.Fatalf("%s(%v, %v) = %v, want %d elements", name, a, b, match, len(a))
		}
		kept, last := 0, -1
		for i, j := range match {
			if j < 0 {
				continue
			}
			if j <= last || j >= len(b) || a[i] != b[j] {
				t.Fatalf("%s(%v, %v) = %v: keeps a[%d] as b[%d]", name, a, b, match, i, j)
			}
			kept, last = kept+1, j
		}
		if exact := len(a)+len(b) < 2*min(limit, 256); exact {
			if want := lcsLen(a, b); kept != want {
				t.Errorf("%s(%v, %v) = %v keeps %d, a longest common subsequence has %d", name, a, b, match, kept, want)
			}
		}
	}
}

// TestMerge3DiffRandom checks the diff on random sequences of few
// distinct elements, with and without a tiny cost limit.
func TestMerge3DiffRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		alpha := 1 + r.IntN(6)
		seq := func() []int {
			s := make([]int, r.IntN(60))
			for i := range s {
				s[i] = r.IntN(alpha)
			}
			return s
		}
		a, b := seq(), seq()
		for _, limit := range []int{1, 2, 5, 1000} {
			checkLineDiff(t, a, b, limit)
		}
	}
}

// TestMerge3Long merges long files with many repeated lines, much changed
// on both sides, which the cost limit keeps quick.
func TestMerge3Long(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	file := func() []byte {
		var b strings.Builder
		for range 5000 {
			fmt.Fprintf(&b, "line %d\n", r.IntN(50))
		}
		return []byte(b.String())
	}
	base, ours, theirs := file(), file(), file()
	start := time.Now()
	merged, n := Merge3(base, ours, theirs)
	if n == 0 || !bytes.Contains(merged, []byte(">>>>>>> theirs\n")) {
		t.Errorf("Merge3 = %d bytes, %d conflicts; want conflicts", len(merged), n)
	}
	t.Logf("%d conflicts in %v", n, time.Since(start))
}

// lcsLen is the length of a longest common subsequence of a and b.
func lcsLen(a, b []int) int {
	row := make([]int, len(b)+1)
	for i := range a {
		diag := 0
		for j := range b {
			next := row[j+1]
			if a[i] == b[j] {
				row[j+1] = diag + 1
			} else {
				row[j+1] = max(row[j+1], row[j])
			}
			diag = next
		}
	}
	return row[len(b)]
}

func FuzzMerge3(f *testing.F) {
	f.Add([]byte("a\nb\nc\n"), []byte("A\nb\nc\n"), []byte("a\nb\nC\n"))
	f.Add([]byte("a\nb\nc\n"), []byte("a\nX\nc\n"), []byte("a\nY\nc\n"))
	f.Add([]byte(""), []byte("x\ny\n"), []byte("x\nz"))
	f.Add([]byte("a\r\nb\r\n"), []byte("a\r\nc\r\n"), []byte("a\nb\n"))
	f.Add([]byte("a\nb"), []byte("a\nb\n"), []byte("\x00"))
	f.Add([]byte("1\n2\n3\n4\n5\n"), []byte("1\n3\n2\n4\n5\n6\n"), []byte("0\n1\n2\n4\n5\n"))
	f.Fuzz(func(t *testing.T, base, ours, theirs []byte) {
		merged, n := Merge3(base, ours, theirs)
		binary := IsBinary(base) || IsBinary(ours) || IsBinary(theirs)
		if n < 0 || n > 0 && (merged == nil) != binary {
			t.Fatalf("Merge3 = %q, %d", merged, n)
		}
		// Merge3's shortcuts, and its line merge without them, which
		// must come to the same.
		for _, merge := range []func(b, o, t []byte) ([]byte, int){Merge3, mergeLines} {
			for _, c := range []struct{ name, b, o, t, want []byte }{
				{name: []byte("ours unchanged"), b: base, o: base, t: theirs, want: theirs},
				{name: []byte("theirs unchanged"), b: base, o: ours, t: base, want: ours},
				{name: []byte("same change (ours)"), b: base, o: ours, t: ours, want: ours},
				{name: []byte("same change (theirs)"), b: base, o: theirs, t: theirs, want: theirs},
			} {
				if got, n := merge(c.b, c.o, c.t); n != 0 || !bytes.Equal(got, c.want) {
					t.Fatalf("%s: merge(%q, %q, %q) = %q, %d; want %q, 0", c.name, c.b, c.o, c.t, got, n, c.want)
				}
			}
		}
		// The line merge does not care which side is which.
		m1, n1 := mergeLines(base, ours, theirs)
		m2, n2 := mergeLines(base, theirs, ours)
		if n1 != n2 || n1 == 0 && !bytes.Equal(m1, m2) {
			t.Fatalf("mergeLines with the sides swapped = %q, %d; want %q, %d", m2, n2, m1, n1)
		}
		if n1 > 0 && !strings.Contains(string(m1), ">>>>>>> theirs") {
			t.Fatalf("mergeLines = %q, %d conflicts without markers", m1, n1)
		}
		ids, _ := internLines(splitLines(base), splitLines(ours))
		checkLineDiff(t, ids[0], ids[1], 1000)
		checkLineDiff(t, ids[0], ids[1], 2)
	})
}
