package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outposthq/outpost/server"
)

// errorOf decodes an error response and checks its status, code and
// reason.
func errorOf(t *testing.T, what string, code int, b []byte, wantStatus int, wantCode, wantReason string) map[string]any {
	t.Helper()
	var e server.ErrorResponse
	if err := json.Unmarshal(b, &e); err != nil || e.Error == nil {
		t.Fatalf("%s: %d, not the error shape: %s", what, code, b)
	}
	if code != wantStatus || string(e.Error.Code) != wantCode || e.Error.Details["reason"] != wantReason {
		t.Errorf("%s: %d %s/%v, want %d %s/%s: %s", what, code, e.Error.Code, e.Error.Details["reason"], wantStatus, wantCode, wantReason, b)
	}
	return e.Error.Details
}

// startHome is start with OUTPOST_HOME in the test's directory: the
// workspaces turns and races make ("new") go there.
func startHome(t *testing.T, mod func(*server.Options)) (*testServer, string) {
	t.Helper()
	home := t.TempDir()
	t.Setenv("OUTPOST_HOME", home)
	return start(t, mod), filepath.Join(home, "workspaces")
}

// entries lists a directory ("" when it does not exist).
func entries(dir string) []string {
	des, _ := os.ReadDir(dir)
	var out []string
	for _, d := range des {
		out = append(out, d.Name())
	}
	return out
}

// TestWorkspaceTurns: a turn in a new workspace with a check records its
// checkpoint (a notice of kind checkpoint in its stream, the result's
// checkpoint, workdir and check), the server removes the workspace whose
// files the checkpoint holds; a fork at a turn starts from that turn's
// files; a resume at a turn, a fork at an unknown turn and a workspace
// the client names are refused with their codes.
func TestWorkspaceTurns(t *testing.T) {
	ts, workspaces := startHome(t, nil)

	st := ts.startTurn(map[string]any{"prompt": "#write=out.txt go", "workspace": "new", "check": "test -f out.txt", "checkpoint_include": []string{"build/"}})
	items := ts.events(st.ID, 0, nil)
	res := items[len(items)-1].data
	if res["error"] != nil {
		t.Fatalf("result: %s", items[len(items)-1].raw)
	}
	var notice map[string]any
	for _, it := range items {
		if it.data["type"] == "notice" && it.data["kind"] == "checkpoint" {
			notice = it.data
		}
	}
	cp, _ := res["checkpoint"].(map[string]any)
	check, _ := res["check"].(map[string]any)
	workdir, _ := res["workdir"].(string)
	if cp == nil || cp["turn"] != 1.0 || cp["changed"] != 1.0 || check["passed"] != true || check["command"] != "test -f out.txt" {
		t.Fatalf("checkpoint %v, check %v", cp, check)
	}
	if notice == nil || notice["details"].(map[string]any)["commit"] != cp["commit"] {
		t.Errorf("no checkpoint notice of commit %v in the stream: %v", cp["commit"], notice)
	}
	if filepath.Dir(workdir) != workspaces {
		t.Errorf("workdir %q is not under %s", workdir, workspaces)
	}
	if _, err := os.Stat(workdir); !os.IsNotExist(err) {
		t.Errorf("the workspace %s whose checkpoint holds its files is still there (%v)", workdir, err)
	}
	// The turn's status carries the same result, as stored turns do.
	_, b, _ := ts.do("GET", "/v1/turns/"+st.ID, nil)
	var got server.TurnStatus
	json.Unmarshal(b, &got)
	if got.Result == nil || got.Result.Checkpoint == nil || got.Result.Checkpoint.Commit != cp["commit"] || got.Result.Check == nil || got.Result.Workdir != workdir {
		t.Errorf("status: %s", b)
	}
	conv := res["conversation"].(string)

	// Turn 2 writes another file; the conversation lists both checkpoints.
	r2 := ts.wait(ts.startTurn(map[string]any{"prompt": "#write=two.txt more", "resume": conv, "workspace": "new", "check": "test -f out.txt && test -f two.txt"}).ID)
	if c, _ := r2["check"].(map[string]any); r2["error"] != nil || c["passed"] != true {
		t.Fatalf("resume in a new workspace (turn 1's files in it): %v", r2)
	}
	_, b, _ = ts.do("GET", "/v1/conversations/"+conv, nil)
	if !strings.Contains(string(b), `"checkpoints":[{"turn":1`) || !strings.Contains(string(b), `{"turn":2`) {
		t.Errorf("conversation's checkpoints: %s", b)
	}

	// A fork at turn 1 has turn 1's files, not turn 2's.
	rf := ts.wait(ts.startTurn(map[string]any{"prompt": "other way", "fork": conv[:12] + "@1", "workspace": "new", "check": "test -f out.txt && ! test -e two.txt"}).ID)
	if c, _ := rf["check"].(map[string]any); rf["error"] != nil || c["passed"] != true || rf["parent"] != conv || rf["conversation"] == conv {
		t.Fatalf("fork at turn 1: %v", rf)
	}
	// Checkpoints off: no checkpoint, and the workspace stays.
	ro := ts.wait(ts.startTurn(map[string]any{"prompt": "quiet", "workspace": "new", "checkpoint": "off"}).ID)
	if ro["error"] != nil || ro["checkpoint"] != nil {
		t.Errorf("checkpoint off: %v", ro)
	}
	if wd, _ := ro["workdir"].(string); wd == "" {
		t.Errorf("no workdir: %v", ro)
	} else if _, err := os.Stat(wd); err != nil {
		t.Errorf("a workspace without checkpoint was removed: %v", err)
	}

	for _, tc := range []struct {
		name           string
		body           map[string]any
		status         int
		code, reason   string
		checkpointKind string
	}{
		{"resume at a turn", map[string]any{"prompt": "x", "resume": conv + "@1"}, 400, "configuration", "bad_request", ""},
		{"fork at turn 0", map[string]any{"prompt": "x", "fork": conv + "@0"}, 400, "configuration", "bad_request", ""},
		{"fork at a word", map[string]any{"prompt": "x", "fork": conv + "@last"}, 400, "configuration", "bad_request", ""},
		{"fork at an unknown turn", map[string]any{"prompt": "x", "fork": conv + "@9"}, 404, "conversation", "not_found", "not_found"},
		{"fork of an unknown conversation", map[string]any{"prompt": "x", "fork": "c0000000000000@1"}, 404, "conversation", "not_found", ""},
		{"fork with a path", map[string]any{"prompt": "x", "fork": "../x@1"}, 400, "conversation", "bad_request", ""},
		{"workspace the client names", map[string]any{"prompt": "x", "workspace": "/tmp/mine"}, 400, "configuration", "bad_request", ""},
		{"unknown checkpoint mode", map[string]any{"prompt": "x", "checkpoint": "sometimes"}, 400, "configuration", "bad_request", ""},
		{"empty include pattern", map[string]any{"prompt": "x", "checkpoint_include": []string{""}}, 400, "configuration", "bad_request", ""},
		{"too many include patterns", map[string]any{"prompt": "x", "checkpoint_include": make([]string, 65)}, 400, "configuration", "bad_request", ""},
		{"negative check timeout", map[string]any{"prompt": "x", "check": "true", "check_timeout_ms": -1}, 400, "configuration", "bad_request", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, b, _ := ts.do("POST", "/v1/turns", tc.body)
			d := errorOf(t, tc.name, code, b, tc.status, tc.code, tc.reason)
			if tc.checkpointKind != "" && d["checkpoint"] != tc.checkpointKind {
				t.Errorf("details.checkpoint %v, want %s", d["checkpoint"], tc.checkpointKind)
			}
		})
	}
}

// TestDiff: a turn's diff as a patch, a stat and JSON; two turns
// compared; and the refusals of bad references, turns and formats.
func TestDiff(t *testing.T) {
	ts, _ := startHome(t, nil)
	conv := ts.wait(ts.startTurn(map[string]any{"prompt": "#write=out.txt go", "workspace": "new"}).ID)["conversation"].(string)
	ts.wait(ts.startTurn(map[string]any{"prompt": "#write=two.txt #rm=out.txt more", "resume": conv, "workspace": "new"}).ID)

	base := "/v1/conversations/" + conv[:12] + "/diff"
	code, b, h := ts.do("GET", base, nil)
	patch := string(b)
	if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/x-diff") ||
		!strings.Contains(patch, "+++ b/two.txt") || !strings.Contains(patch, "+written by echo") || !strings.Contains(patch, "--- a/out.txt") {
		t.Fatalf("patch of the last turn: %d %q\n%s", code, h.Get("Content-Type"), patch)
	}
	if code, b, _ := ts.do("GET", base+"?format=patch&turn=2", nil); code != 200 || string(b) != patch {
		t.Errorf("turn=2 is the last turn: %d\n%s", code, b)
	}
	code, b, h = ts.do("GET", base+"?turn=1&format=stat", nil)
	if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/plain") || !strings.Contains(string(b), "out.txt") ||
		!strings.Contains(string(b), " 1 file(s) changed, 1 insertion(s)(+), 0 deletion(s)(-)") {
		t.Errorf("stat of turn 1: %d %q\n%s", code, h.Get("Content-Type"), b)
	}
	code, b, _ = ts.do("GET", base+"?format=json", nil)
	var d server.Diff
	if err := json.Unmarshal(b, &d); code != 200 || err != nil || len(d.Files) != 2 || d.Added != 1 || d.Deleted != 1 || d.From == "" || d.To == "" {
		t.Fatalf("json: %d %s", code, b)
	}
	actions := map[string]string{}
	for _, f := range d.Files {
		actions[f.Path] = f.Action
	}
	if actions["out.txt"] != "deleted" || actions["two.txt"] != "added" {
		t.Errorf("files %v", d.Files)
	}
	// Turn 1's workspace against turn 2's: the same change as turn 2's.
	code, b, _ = ts.do("GET", base+"?turn=1&to="+conv+"@2&format=json", nil)
	var d2 server.Diff
	if json.Unmarshal(b, &d2); code != 200 || len(d2.Files) != 2 || d2.To != d.To {
		t.Errorf("turn 1 to turn 2: %d %s", code, b)
	}
	// A turn against itself: an empty patch.
	if code, b, _ := ts.do("GET", base+"?turn=2&to="+conv, nil); code != 200 || len(b) != 0 {
		t.Errorf("a workspace against itself: %d %q", code, b)
	}

	for _, tc := range []struct {
		name, query  string
		status       int
		code, reason string
	}{
		{"unknown format", "?format=xml", 400, "configuration", "bad_request"},
		{"turn 0", "?turn=0", 400, "configuration", "bad_request"},
		{"turn a word", "?turn=last", 400, "configuration", "bad_request"},
		{"unknown turn", "?turn=9", 404, "conversation", "not_found"},
		{"to with a path", "?to=../../etc", 400, "conversation", "bad_request"},
		{"to at turn 0", "?to=" + conv + "@0", 400, "configuration", "bad_request"},
		{"to an unknown conversation", "?to=c0000000000000", 404, "conversation", "not_found"},
		{"to an unknown turn", "?to=" + conv + "@7", 404, "conversation", "not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, b, _ := ts.do("GET", base+tc.query, nil)
			errorOf(t, tc.name, code, b, tc.status, tc.code, tc.reason)
		})
	}
	code, b, _ = ts.do("GET", "/v1/conversations/c0000000000000/diff", nil)
	errorOf(t, "unknown conversation", code, b, 404, "conversation", "not_found")
	// A conversation made without checkpoints has none to show.
	off := ts.wait(ts.startTurn(map[string]any{"prompt": "hi", "checkpoint": "off"}).ID)["conversation"].(string)
	code, b, _ = ts.do("GET", "/v1/conversations/"+off+"/diff", nil)
	if d := errorOf(t, "no checkpoint", code, b, 404, "conversation", "not_found"); d["checkpoint"] != "not_found" {
		t.Errorf("details %v", d)
	}
}

// raceCheck passes in the second contestant's workspace only.
const raceCheck = `test -f out.txt && case "$PWD" in *-race-1-*) exit 0;; *) echo "not this one"; exit 1;; esac`

// TestRace: a race of three echo contestants whose check passes for the
// second only, as one JSON answer and as an event stream (every item
// valid against RaceItem); the contestants are conversations whose
// diffs the API shows; refusals have their codes.
func TestRace(t *testing.T) {
	ts, workspaces := startHome(t, nil)
	os.WriteFile(filepath.Join(ts.workdir, "start.txt"), []byte("from the server's directory\n"), 0o644)
	req := map[string]any{"prompt": "#write=out.txt solve it", "agents": []string{"echo"}, "count": 3, "check": raceCheck}

	code, b, _ := ts.do("POST", "/v1/races", req)
	var rr server.RaceResponse
	if err := json.Unmarshal(b, &rr); code != 200 || err != nil || rr.Race.RaceResult == nil {
		t.Fatalf("race: %d %s", code, b)
	}
	race := rr.Race
	if race.Type != "race" || race.Winner != 1 || race.Conversation == "" || race.Conversation != rr.Results[1].Conversation || len(race.Contestants) != 3 || len(rr.Results) != 3 {
		t.Fatalf("race: %s", b)
	}
	for i, l := range rr.Results {
		c := race.Contestants[i]
		if l.Contestant != i || l.Type != "result" || l.Error != nil || l.Check == nil || l.Check.Passed != (i == 1) || l.Checkpoint == nil || c.Passed != (i == 1) || c.Files != 1 {
			t.Errorf("contestant %d: line %+v, contestant %+v", i, l, c)
		}
		if _, err := os.Stat(c.Workdir); !os.IsNotExist(err) {
			t.Errorf("contestant %d's workspace %s is still there", i, c.Workdir)
		}
	}
	if got := entries(workspaces); len(got) != 0 {
		t.Errorf("workspaces left: %v", got)
	}
	// The winner's work, through the diff route; the start is the server's
	// directory, untouched.
	code, b, _ = ts.do("GET", "/v1/conversations/"+race.Conversation+"/diff?format=stat", nil)
	if code != 200 || !strings.Contains(string(b), "out.txt") || strings.Contains(string(b), "start.txt") {
		t.Errorf("the winner's diff: %d %s", code, b)
	}
	if _, err := os.Stat(filepath.Join(ts.workdir, "out.txt")); !os.IsNotExist(err) {
		t.Error("a contestant wrote into the server's directory")
	}

	// The same race, streamed: progress, events, result lines, race line.
	items := ts.raceStream(t, req, 200)
	progress := map[float64][]string{}
	var lines, races int
	var events int
	for _, it := range items {
		switch it.data["type"] {
		case "progress":
			i := it.data["contestant"].(float64)
			progress[i] = append(progress[i], it.data["state"].(string))
		case "result":
			lines++
		case "race":
			races++
		default:
			if _, ok := it.data["contestant"].(float64); !ok {
				t.Errorf("an event without its contestant: %s", it.raw)
			}
			events++
		}
	}
	last := items[len(items)-1].data
	if last["type"] != "race" || last["winner"] != 1.0 || lines != 3 || races != 1 || events == 0 {
		t.Fatalf("stream: %d result lines, %d race lines, %d events; last %v", lines, races, events, last)
	}
	for i := range 3 {
		if got := strings.Join(progress[float64(i)], ","); got != "started,finished,checked" {
			t.Errorf("contestant %v's progress: %s", i, got)
		}
	}

	// From the winner's checkpoint: contestants start with its files, and
	// those of its agent fork it.
	from := map[string]any{"prompt": "#write=more.txt again", "agents": []string{"echo"}, "count": 2, "from": race.Conversation + "@1", "check": "test -f start.txt && test -f out.txt && test -f more.txt"}
	code, b, _ = ts.do("POST", "/v1/races", from)
	var fr server.RaceResponse
	if json.Unmarshal(b, &fr); code != 200 || fr.Race.RaceResult == nil || fr.Race.Winner < 0 || len(fr.Results) != 2 || fr.Results[0].Parent != race.Conversation {
		t.Errorf("race from a checkpoint: %d %s", code, b)
	}

	// Variables reach every contestant (its check runs with the agent's
	// environment).
	code, b, _ = ts.do("POST", "/v1/races", map[string]any{"prompt": "hi", "env": map[string]string{"RACE_COLOUR": "teal"}, "check": `test "$RACE_COLOUR" = teal`})
	var er server.RaceResponse
	if json.Unmarshal(b, &er); code != 200 || er.Race.RaceResult == nil || er.Race.Winner != 0 {
		t.Errorf("race with env: %d %s", code, b)
	}

	code, b, _ = ts.do("GET", "/metrics", nil)
	for _, want := range []string{`outpost_races_total{result="winner"} 4`, `outpost_turns_total{agent="echo",code="ok",sandbox="local"} 9`, "outpost_turns_running 0", "outpost_turns_queued 0"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %s:\n%s", want, grep(string(b), "outpost_"))
		}
	}

	conv := race.Conversation
	for _, tc := range []struct {
		name           string
		body           any
		status         int
		code, reason   string
		checkpointKind string
	}{
		{"17 contestants", map[string]any{"prompt": "x", "agents": []string{"echo"}, "count": 17}, 400, "configuration", "bad_request", ""},
		{"9 agents twice", map[string]any{"prompt": "x", "agents": strings.Split("echo,echo,echo,echo,echo,echo,echo,echo,echo", ","), "count": 2}, 400, "configuration", "bad_request", ""},
		{"unknown agent", map[string]any{"prompt": "x", "agents": []string{"echo", "nope"}}, 400, "configuration", "bad_request", ""},
		{"unknown judge", map[string]any{"prompt": "x", "judge": "nope"}, 400, "configuration", "bad_request", ""},
		{"empty prompt", map[string]any{"prompt": " "}, 400, "configuration", "bad_request", ""},
		{"negative count", map[string]any{"prompt": "x", "count": -1}, 400, "configuration", "bad_request", ""},
		{"negative budget", map[string]any{"prompt": "x", "budget": -5}, 400, "configuration", "bad_request", ""},
		{"timeout over the ceiling", map[string]any{"prompt": "x", "timeout_ms": 7_200_000}, 400, "configuration", "bad_request", ""},
		{"unknown field", map[string]any{"prompt": "x", "workdir": "/etc"}, 400, "configuration", "bad_request", ""},
		{"sandbox not served", map[string]any{"prompt": "x", "sandbox": "docker"}, 400, "configuration", "bad_request", ""},
		{"setting not allowed", map[string]any{"prompt": "x", "settings": map[string]string{"host": "tcp://192.0.2.1:2375"}}, 400, "configuration", "bad_request", ""},
		{"from a path", map[string]any{"prompt": "x", "from": "../../etc"}, 400, "conversation", "bad_request", ""},
		{"from turn 0", map[string]any{"prompt": "x", "from": conv + "@0"}, 400, "configuration", "bad_request", ""},
		{"from an unknown conversation", map[string]any{"prompt": "x", "from": "c0000000000000"}, 404, "conversation", "not_found", ""},
		{"from an unknown turn", map[string]any{"prompt": "x", "from": conv + "@4"}, 404, "conversation", "not_found", "not_found"},
		{"not JSON", "agents=echo", 400, "configuration", "bad_request", ""},
		{"an option echo does not take", map[string]any{"prompt": "x", "options": map[string]string{"budget": "1"}}, 400, "configuration", "bad_request", ""},
		{"options of an agent not racing", map[string]any{"prompt": "x", "agent_options": map[string]any{"claude": map[string]string{"permission-mode": "acceptEdits"}}}, 400, "configuration", "bad_request", ""},
		{"bad variable name", map[string]any{"prompt": "x", "env": map[string]string{"A=B": "c"}}, 400, "configuration", "bad_request", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, b, _ := ts.do("POST", "/v1/races", tc.body)
			d := errorOf(t, tc.name, code, b, tc.status, tc.code, tc.reason)
			if tc.checkpointKind != "" && d["checkpoint"] != tc.checkpointKind {
				t.Errorf("details.checkpoint %v, want %s", d["checkpoint"], tc.checkpointKind)
			}
		})
	}
	// A refusal asked as a stream is the same error, not a stream.
	ts.raceStream(t, map[string]any{"prompt": "x", "agents": []string{"nope"}}, 400)
}

// TestRaceLimits: a race's contestants share the server's turn slots
// (one at a time here: every contestant still runs, none at once with
// another), a race larger than what the server runs and queues is
// refused, and a server whose store keeps no checkpoints refuses races
// (501).
func TestRaceLimits(t *testing.T) {
	ts, _ := startHome(t, func(o *server.Options) { o.MaxConcurrent, o.MaxQueue = 1, 2 })
	code, b, _ := ts.do("POST", "/v1/races", map[string]any{"prompt": "#write=out.txt #slow=20 go", "count": 3})
	var rr server.RaceResponse
	if json.Unmarshal(b, &rr); code != 200 || len(rr.Results) != 3 {
		t.Fatalf("race: %d %s", code, b)
	}
	spans := make([][2]int64, 0, 3)
	for _, l := range rr.Results {
		spans = append(spans, [2]int64{l.StartedAt.UnixMilli(), l.CompletedAt.UnixMilli()})
	}
	for i := range spans {
		for j := range spans {
			if i < j && overlap(spans[i][0], spans[i][1], spans[j][0], spans[j][1]) {
				t.Errorf("contestants %d and %d ran at once with one slot: %v %v", i, j, spans[i], spans[j])
			}
		}
	}
	code, b, _ = ts.do("POST", "/v1/races", map[string]any{"prompt": "x", "count": 4})
	errorOf(t, "over max-concurrent + max-queue", code, b, 400, "configuration", "bad_request")

	bare, _ := startHome(t, func(o *server.Options) { o.Store = nil })
	code, b, _ = bare.do("POST", "/v1/races", map[string]any{"prompt": "x"})
	errorOf(t, "no checkpoints", code, b, 501, "configuration", "unsupported")
	code, b, _ = bare.do("GET", "/v1/conversations/c0000000000000/diff", nil)
	errorOf(t, "diff without a store", code, b, 404, "conversation", "not_found")
}

func overlap(a0, a1, b0, b1 int64) bool { return a0 < b1 && b0 < a1 }

// raceStream posts a race asking for its event stream and returns its
// items, each validated against RaceItem; a status other than 200 must
// be the error shape.
func (ts *testServer) raceStream(t *testing.T, body map[string]any, status int) []sseItem {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", ts.url+"/v1/races", strings.NewReader(string(b)))
	req.Header.Set("Authorization", "Bearer "+ts.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != status {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("race stream: %d %s, want %d", resp.StatusCode, b, status)
	}
	if status != 200 {
		b, _ := io.ReadAll(resp.Body)
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || !strings.Contains(string(b), `"error"`) {
			t.Errorf("a refused race stream: %q %s", resp.Header.Get("Content-Type"), b)
		}
		return nil
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	items, err := readSSE(resp.Body, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, it := range items {
		if it.seq != int64(i+1) {
			t.Errorf("item %d has id %d", i+1, it.seq)
		}
		ts.checker.secretFree("race item", []byte(it.raw))
		ts.checker.validate("RaceItem", it.raw)
	}
	if len(items) == 0 {
		t.Fatal("an empty race stream")
	}
	return items
}

// TestRaceCancel: a client that goes away mid-race cancels it: every
// contestant ends cancelled (by the client), its slot given back, its
// conversation captured.
func TestRaceCancel(t *testing.T) {
	ts, _ := startHome(t, nil)
	b, _ := json.Marshal(map[string]any{"prompt": "#slow=2000", "count": 2})
	req, _ := http.NewRequest("POST", ts.url+"/v1/races", strings.NewReader(string(b)))
	req.Header.Set("Authorization", "Bearer "+ts.token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	// Both contestants' agents are running: each has sent a message.
	running := map[float64]bool{}
	readSSE(resp.Body, func(it sseItem) bool {
		if it.data["type"] == "message" {
			running[it.data["contestant"].(float64)] = true
		}
		return len(running) == 2
	})
	resp.Body.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		_, b, _ := ts.do("GET", "/metrics", nil)
		m := string(b)
		if strings.Contains(m, `outpost_turns_total{agent="echo",code="cancelled",sandbox="local"} 2`) && strings.Contains(m, "outpost_turns_running 0") &&
			strings.Contains(m, `outpost_races_total{result="no_winner"} 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the race was not cancelled:\n%s", grep(m, "outpost_"))
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, not timing
	}
	list, _ := ts.store.List(context.Background())
	if len(list) != 2 {
		t.Errorf("%d conversations captured, want the 2 cancelled contestants'", len(list))
	}
	if !strings.Contains(ts.logs.String(), `"msg":"outpost turn","race":`) || !strings.Contains(ts.logs.String(), `"code":"cancelled"`) {
		t.Errorf("no cancelled contestant in the logs")
	}
}
