package output

import (
	"path"
	"strings"
	"sync"

	"github.com/outposthq/outpost/harness/kit/lazyre"
)

// MaxMentionedPaths bounds the paths MentionedPaths returns.
const MaxMentionedPaths = 200

// maxPathLen bounds one mentioned path; a longer word is not a path.
const maxPathLen = 1024

// fileExtensions are the extensions that make a word without a "/" a file
// name ("parser.go"), built on first use.
var fileExtensions = sync.OnceValue(func() map[string]bool {
	m := map[string]bool{}
	for _, e := range strings.Fields(`go mod sum py pyi ipynb js mjs cjs jsx ts tsx vue svelte java kt kts scala groovy gradle
		c h cc cpp cxx hpp hh cs fs rs swift m mm rb php pl lua r dart ex exs erl hs clj elm zig nim
		sh bash zsh fish ps1 bat sql proto graphql md mdx rst txt adoc tex html htm css scss sass less
		json jsonl yaml yml toml ini cfg conf env xml csv tsv lock tf hcl nix dockerfile mk cmake patch diff
		svg png jpg jpeg gif pdf log`) {
		m[e] = true
	}
	return m
})

// fileNames are the file names without an extension that are files all
// the same.
var fileNames = map[string]bool{"Makefile": true, "Dockerfile": true, "Containerfile": true, "Gemfile": true, "Rakefile": true,
	"Procfile": true, "Jenkinsfile": true, "Vagrantfile": true, "LICENSE": true, "README": true, "CHANGELOG": true, "go.work": true}

// pathChars is what a mentioned path is made of; a word with anything else
// (a URL's "://", "=", a quote) is not a path.
var pathChars = lazyre.New(`^[A-Za-z0-9._/~@+%#-]+$`)

// lineSuffix is a ":line" or ":line:column" after a path ("main.go:12:3").
var lineSuffix = lazyre.New(`(:\d+)+$`)

// MentionedPaths scrapes the file paths a free text mentions, as a
// team-of-agents CLI does with an answer that holds no protocol block:
// words that contain a "/" or end with a known file extension (or are a
// known file name such as Makefile), with the quotes, brackets, markdown
// marks, trailing punctuation and ":line:column" around them taken off and
// a leading "./" dropped. Whether the files exist is not checked. Paths
// are returned once each, in the order of first mention, at most
// MaxMentionedPaths; nil when there are none.
func MentionedPaths(text string) []string {
	if len(text) > MaxText {
		text = text[len(text)-MaxText:]
	}
	var out []string
	seen := map[string]bool{}
	for _, w := range strings.FieldsFunc(text, isPathSeparator) {
		p, ok := mentionedPath(w)
		if !ok || seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, p)
		if len(out) == MaxMentionedPaths {
			break
		}
	}
	return out
}

func isPathSeparator(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\r', '\v', '\f', ',', ';', '|', '`', '"', '\'', '(', ')', '[', ']', '{', '}', '<', '>', '*', '\u00a0':
		return true
	}
	return false
}

// mentionedPath is w as a path, when it looks like one.
func mentionedPath(w string) (string, bool) {
	w = strings.TrimRight(w, ".:!?")
	w = lineSuffix.ReplaceAllString(w, "")
	for strings.HasPrefix(w, "./") {
		w = w[2:]
	}
	if w == "" || len(w) > maxPathLen || !pathChars.MatchString(w) || strings.Trim(w, "./~") == "" {
		return "", false
	}
	if strings.Contains(w, "/") {
		return w, true
	}
	base := path.Base(w)
	if fileNames[base] {
		return w, true
	}
	i := strings.LastIndexByte(base, '.')
	return w, i > 0 && fileExtensions()[strings.ToLower(base[i+1:])]
}
