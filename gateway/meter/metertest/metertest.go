// Package metertest is test infrastructure for meters: Proxy serves a
// gateway.Meter's contract in front of a fake model API, as the
// credential gateway does with a grant's Meter, so a meter is tested
// without a grant.
package metertest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/outposthq/outpost/gateway"
)

// flushing flushes every write, so that a stream reaches the client as
// it comes.
type flushing struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (f flushing) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err == nil {
		err = f.rc.Flush()
	}
	return n, err
}

// TB is the part of testing.TB that Proxy uses.
type TB interface {
	Helper()
	Cleanup(func())
}

// Proxy serves what the credential gateway does with a grant's Meter,
// for the one route 0 to upstream (http://host:port): Before may answer
// in the upstream's place; otherwise the request goes upstream unchanged
// but for its host, After sees the response, and the body is copied in
// small reads, flushed after each, as it streams. It returns the proxy's
// base URL and closes it at the test's cleanup.
func Proxy(t TB, m gateway.Meter, upstream string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp := m.Before(r, 0)
		if resp == nil {
			out := r.Clone(r.Context())
			out.URL.Scheme, out.URL.Host, out.Host, out.RequestURI = "http", strings.TrimPrefix(upstream, "http://"), "", ""
			var err error
			if resp, err = http.DefaultTransport.RoundTrip(out); err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			m.After(resp, 0)
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.CopyBuffer(flushing{w, http.NewResponseController(w)}, resp.Body, make([]byte, 512))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
