package gateway

import (
	"bytes"
	"io"
	"log"
	"net/url"
	"strings"
	"sync"
)

// live is every gateway not yet closed: RedactingWriter redacts their
// grants' secrets and tokens.
var live sync.Map // *Gateway → struct{}

// secrets are the values no record may carry: every live grant's token
// and real credentials (as they are and query-escaped, as an upstream
// URL carries them).
func (g *Gateway) secrets() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for _, gr := range g.grants {
		out = append(out, gr.token)
		for _, r := range gr.opts.Routes {
			if r.Secret != "" {
				out = append(out, r.Secret, url.QueryEscape(r.Secret))
			}
		}
	}
	return out
}

// redactAll replaces every secret of gs in s.
func redactAll(s string, gs ...*Gateway) string {
	for _, g := range gs {
		for _, v := range g.secrets() {
			if v != "" {
				s = strings.ReplaceAll(s, v, "[secret]")
			}
		}
	}
	return s
}

// errorLog is the *log.Logger of the gateway's HTTP server and proxies
// (net/http's and httputil's own messages): each line becomes a warning
// of the gateway's Logger, every live grant's secret and token redacted.
func (g *Gateway) errorLog() *log.Logger {
	return log.New(logFunc(func(msg string) {
		g.log.Warn("gateway: "+redactAll(msg, g), "source", "net/http")
	}), "", 0)
}

type logFunc func(string)

func (f logFunc) Write(p []byte) (int, error) {
	f(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// RedactingWriter returns w behind a filter that redacts the secrets and
// tokens of every live gateway's grants from each write. A program that
// runs gateways gives it to Go's global logger (log.SetOutput), where
// net/http's transports write some messages of their own (an unsolicited
// response on an idle connection, HTTP/2's GODEBUG=http2debug traces,
// which quote the headers sent, the real credential among them).
func RedactingWriter(w io.Writer) io.Writer {
	return logFunc(func(msg string) {
		var gs []*Gateway
		live.Range(func(k, _ any) bool {
			gs = append(gs, k.(*Gateway))
			return true
		})
		_, _ = io.WriteString(w, redactAll(msg, gs...)+"\n")
	})
}
