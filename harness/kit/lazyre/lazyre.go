// Package lazyre is a regular expression compiled on first use, for the
// package-level patterns of outpost's packages: compiling them in a
// package-level var runs at every process start (a bounded repetition
// such as {0,199} alone costs hundreds of kilobytes), and most runs never
// match most patterns.
package lazyre

import (
	"regexp"
	"sync"
)

// Regexp is a regular expression compiled the first time it is used. The
// methods are those of regexp.Regexp that outpost uses; Re returns the
// compiled expression for the others.
type Regexp struct {
	expr string
	once sync.Once
	re   *regexp.Regexp
}

// New returns expr, to be compiled (regexp.MustCompile) on first use: an
// invalid expression panics then, so every pattern needs a test that uses
// it.
func New(expr string) *Regexp { return &Regexp{expr: expr} }

// Re returns the compiled expression.
func (r *Regexp) Re() *regexp.Regexp {
	r.once.Do(func() { r.re = regexp.MustCompile(r.expr) })
	return r.re
}

// String returns the source text of the expression.
func (r *Regexp) String() string { return r.expr }

// MatchString is regexp.Regexp.MatchString.
func (r *Regexp) MatchString(s string) bool { return r.Re().MatchString(s) }

// FindStringSubmatch is regexp.Regexp.FindStringSubmatch.
func (r *Regexp) FindStringSubmatch(s string) []string { return r.Re().FindStringSubmatch(s) }

// FindAllStringSubmatch is regexp.Regexp.FindAllStringSubmatch.
func (r *Regexp) FindAllStringSubmatch(s string, n int) [][]string {
	return r.Re().FindAllStringSubmatch(s, n)
}

// ReplaceAllString is regexp.Regexp.ReplaceAllString.
func (r *Regexp) ReplaceAllString(src, repl string) string { return r.Re().ReplaceAllString(src, repl) }
