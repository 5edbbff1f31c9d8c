// Package ui is the web console that `outpost serve` serves at /ui/: static
// HTML, CSS and hand-written ES modules, embedded with go:embed, with no
// build step and nothing loaded from outside (docs/console.md).
//
// The console is a client of the public HTTP API like any other: its
// scripts call /v1/... with the bearer token the user signs in with (kept
// in sessionStorage, or localStorage when asked), read event streams with
// fetch so that the token never goes in a URL, and never use a cookie, so
// the console's pages hold no authority of their own: they are served to
// anyone, without a token, and carry only code. Every response here has a
// strict Content-Security-Policy (no inline script, nothing from another
// origin, no framing).
package ui

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var static embed.FS

// Prefix is the path the console is served under.
const Prefix = "/ui/"

// CSP is the Content-Security-Policy of every console response: scripts,
// styles, images and connections from the server's own origin only, no
// inline script or style attribute, no plugin, no framing, forms posted
// nowhere.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the console's files under Prefix, with the security
// headers on every answer. Paths that name no file get the console's page
// (its routes are in the URL's fragment, so that is only for a mistyped
// address).
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix(Prefix, http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cache-Control", "no-cache")
		name := strings.TrimPrefix(r.URL.Path, Prefix)
		if name != "" && !exists(sub, name) {
			r = r.Clone(r.Context())
			r.URL.Path = Prefix
		}
		files.ServeHTTP(w, r)
	})
}

func exists(fsys fs.FS, name string) bool {
	st, err := fs.Stat(fsys, name)
	return err == nil && !st.IsDir()
}
