package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	liberrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/harness/echo"
	_ "github.com/outposthq/outpost/providers/local" // registers "local"
	"github.com/outposthq/outpost/server"
)

func TestMain(m *testing.M) {
	echo.MaybeRun()
	maybeClient()
	os.Exit(m.Run())
}

// canary is a secret the server's environment and .outpost/.env hold; it
// must never appear in anything the server says.
const (
	canary       = "canary-7f3c9a1e5b"
	canaryDotEnv = "canary-dotenv-2b8e4d"
)

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type testServer struct {
	t       *testing.T
	srv     *server.Server
	url     string
	store   conversation.Store
	token   string
	logs    *syncBuffer
	client  *http.Client
	checker *checker
	workdir string
}

// start serves the API on loopback with a token, a store, the canary in
// the environment and in .outpost/.env. Every exchange through ts.client
// is validated against the OpenAPI document.
func start(t *testing.T, mod func(*server.Options)) *testServer {
	t.Helper()
	return startHTTP(t, mod, nil)
}

// startHTTP is start with the http.Server's settings changed by hs (nil:
// HTTPServer's).
func startHTTP(t *testing.T, mod func(*server.Options), hs func(*http.Server)) *testServer {
	t.Helper()
	dir := t.TempDir()
	wd := filepath.Join(dir, "work")
	os.MkdirAll(filepath.Join(wd, ".outpost"), 0o700)
	os.WriteFile(filepath.Join(wd, ".outpost", ".env"), []byte("SERVICE_TOKEN="+canaryDotEnv+"\n"), 0o600)
	tokFile := filepath.Join(dir, "tokens")
	token, err := server.AddToken(tokFile, "test")
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := server.LoadTokens(tokFile)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	store := conversation.NewFS(filepath.Join(dir, "store"))
	opts := &server.Options{
		Store:     store,
		Workdir:   wd,
		Environ:   []string{"PATH=" + os.Getenv("PATH"), echo.TokenVariable + "=" + canary},
		Tokens:    tokens,
		Logger:    newLogger(logs),
		Keepalive: time.Hour,
		// echo cannot use the credential gateway: its secret (the
		// canary) goes in its sandbox, which a client may take only
		// when the policy allows env (tenancy_test.go tests the policy).
		Policy: server.Policy{Secrets: []string{"gateway", "env"}},
	}
	if mod != nil {
		mod(opts)
	}
	srv, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var h *http.Server
	if hs != nil {
		h = srv.HTTPServer()
		hs(h)
	}
	go srv.Serve(ln, h)
	ts := &testServer{t: t, srv: srv, url: "http://" + ln.Addr().String(), store: store, token: token, logs: logs, workdir: wd, checker: newChecker(t)}
	ts.client = &http.Client{Transport: &validating{c: ts.checker, rt: http.DefaultTransport}}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if strings.Contains(logs.String(), canary) || strings.Contains(logs.String(), canaryDotEnv) {
			t.Errorf("a canary secret is in the server's logs")
		}
		if t.Failed() {
			t.Logf("server logs:\n%s", logs.String())
		}
	})
	return ts
}

// do sends a request with the token (unless the header is set) and
// returns the status, the body and the headers.
func (ts *testServer) do(method, path string, body any, hdr ...string) (int, []byte, http.Header) {
	ts.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, ts.url+path, r)
	if err != nil {
		ts.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+ts.token)
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	ts.checker.secretFree("response to "+method+" "+path, b)
	return resp.StatusCode, b, resp.Header
}

func (ts *testServer) startTurn(req map[string]any) server.TurnStatus {
	ts.t.Helper()
	code, b, _ := ts.do("POST", "/v1/turns", req)
	if code != http.StatusAccepted {
		ts.t.Fatalf("POST /v1/turns: %d %s", code, b)
	}
	var st server.TurnStatus
	if err := json.Unmarshal(b, &st); err != nil {
		ts.t.Fatal(err)
	}
	return st
}

// sseItem is one event of a turn's stream.
type sseItem struct {
	seq  int64
	data map[string]any
	raw  string
}

// events reads a turn's stream from after; stop (optional) ends the read
// early when it returns true.
func (ts *testServer) events(id string, after int64, stop func(sseItem) bool) []sseItem {
	ts.t.Helper()
	req, _ := http.NewRequest("GET", ts.url+"/v1/turns/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+ts.token)
	if after > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(after, 10))
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		ts.t.Fatalf("events: %d %s", resp.StatusCode, b)
	}
	items, err := readSSE(resp.Body, stop)
	if err != nil {
		ts.t.Fatal(err)
	}
	for _, it := range items {
		ts.checker.secretFree("event", []byte(it.raw))
		ts.checker.item(it.raw)
	}
	return items
}

func readSSE(r io.Reader, stop func(sseItem) bool) ([]sseItem, error) {
	var out []sseItem
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var cur sseItem
	has := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if has {
				if err := json.Unmarshal([]byte(cur.raw), &cur.data); err != nil {
					return out, fmt.Errorf("event %d: %v", cur.seq, err)
				}
				out = append(out, cur)
				if stop != nil && stop(cur) {
					return out, nil
				}
			}
			cur, has = sseItem{}, false
		case strings.HasPrefix(line, "id: "):
			cur.seq, _ = strconv.ParseInt(line[4:], 10, 64)
		case strings.HasPrefix(line, "data: "):
			cur.raw, has = line[6:], true
		}
	}
	return out, sc.Err()
}

// wait follows a turn to its result line.
func (ts *testServer) wait(id string) map[string]any {
	ts.t.Helper()
	items := ts.events(id, 0, nil)
	if len(items) == 0 {
		ts.t.Fatalf("turn %s: no events", id)
	}
	last := items[len(items)-1]
	if last.data["type"] != "result" {
		ts.t.Fatalf("turn %s: last event is %s, not the result", id, last.raw)
	}
	return last.data
}

// checker validates exchanges against the OpenAPI document and records
// which operations were exercised.
type checker struct {
	t       *testing.T
	v       validator.Validator
	item    func(raw string)
	schema  func(name string) *base.Schema
	mu      sync.Mutex
	covered map[string]bool
	// vmu serializes validation: libopenapi renders a schema by writing
	// to the document's shared model, so two validations at once race
	// (the race detector found it when eight turns were followed at once).
	vmu sync.Mutex
}

var pathParam = regexp.MustCompile(`\{[^}]+\}`)

func newChecker(t *testing.T) *checker {
	doc, err := libopenapi.NewDocument(server.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("the OpenAPI document is invalid: %s: %s", e.Message, e.Reason)
		}
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		t.Fatal(err)
	}
	stream := m.Model.Components.Schemas.GetOrZero("StreamItem").Schema()
	sv := schema_validation.NewSchemaValidator()
	c := &checker{t: t, v: v, covered: map[string]bool{}}
	c.item = func(raw string) {
		c.vmu.Lock()
		ok, errs := sv.ValidateSchemaString(stream, raw)
		c.vmu.Unlock()
		if !ok {
			t.Errorf("stream item does not match StreamItem: %s\n%s", describe(errs), raw)
		}
	}
	c.schema = func(name string) *base.Schema { return m.Model.Components.Schemas.GetOrZero(name).Schema() }
	return c
}

// validate checks one JSON value against a schema of the document's
// components.
func (c *checker) validate(name, raw string) {
	c.t.Helper()
	c.vmu.Lock()
	sc := c.schema(name)
	var ok bool
	var errs []*liberrors.ValidationError
	if sc != nil {
		ok, errs = schema_validation.NewSchemaValidator().ValidateSchemaString(sc, raw)
	}
	c.vmu.Unlock()
	if sc == nil {
		c.t.Fatalf("the document has no schema %s", name)
	}
	if !ok {
		c.t.Errorf("%s does not match %s: %s", raw, name, describe(errs))
	}
}

func describe[E interface{ Error() string }](errs []E) string {
	var s []string
	for _, e := range errs {
		s = append(s, e.Error())
	}
	return strings.Join(s, "; ")
}

func (c *checker) secretFree(what string, b []byte) {
	if bytes.Contains(b, []byte(canary)) || bytes.Contains(b, []byte(canaryDotEnv)) {
		c.t.Errorf("a canary secret is in the %s: %s", what, b)
	}
}

// operation maps a request to its OpenAPI operation, "METHOD /path/{id}".
func operation(method, path string) string {
	for _, r := range server.Routes() {
		m, p, _ := strings.Cut(r, " ")
		if m == method && regexp.MustCompile("^"+pathParam.ReplaceAllString(p, `[^/]+`)+"$").MatchString(path) {
			return r
		}
	}
	return ""
}

// validating is a RoundTripper that validates every request and response
// against the OpenAPI document.
type validating struct {
	c  *checker
	rt http.RoundTripper
}

func (v *validating) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := v.rt.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	op := operation(req.Method, req.URL.Path)
	if op == "" {
		return resp, nil // an undocumented route: its 404 is checked by the tests
	}
	v.c.mu.Lock()
	v.c.covered[op+" "+strconv.Itoa(resp.StatusCode)] = true
	v.c.mu.Unlock()
	vreq := req.Clone(req.Context())
	vreq.Body = io.NopCloser(bytes.NewReader(body))
	// Requests the server refuses on purpose (malformed, unknown fields,
	// oversized) are not valid by design; their responses still are.
	if resp.StatusCode < 400 {
		v.c.vmu.Lock()
		ok, errs := v.c.v.ValidateHttpRequest(vreq)
		v.c.vmu.Unlock()
		if !ok {
			v.c.t.Errorf("%s %s: request does not match the OpenAPI document: %s", req.Method, req.URL.Path, verrs(errs))
		}
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		v.c.mu.Lock()
		v.c.covered[op+" sse"] = true
		v.c.mu.Unlock()
		return resp, nil // items are validated one by one (checker.item)
	}
	rb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(rb))
	vresp := *resp
	vresp.Body = io.NopCloser(bytes.NewReader(rb))
	vreq.Body = io.NopCloser(bytes.NewReader(body))
	v.c.vmu.Lock()
	ok, errs := v.c.v.ValidateHttpResponse(vreq, &vresp)
	v.c.vmu.Unlock()
	if !ok {
		v.c.t.Errorf("%s %s → %d: response does not match the OpenAPI document: %s\n%s", req.Method, req.URL.Path, resp.StatusCode, verrs(errs), rb)
	}
	return resp, nil
}

func verrs[E interface{ Error() string }](errs []E) string { return describe(errs) }
