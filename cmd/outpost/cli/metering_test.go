package cli_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/harness"
)

// TestUsageMetered: `outpost usage` shows the gateway's count per model
// beside the agent's, and what is left of the conversation's budget, in
// text and in JSON.
func TestUsageMetered(t *testing.T) {
	home, wd := t.TempDir(), t.TempDir()
	_, out, _ := run(t, home, wd, "run", "--json", "--budget", "5000", "seed")
	id := resultOf(t, out)["conversation"].(string)
	store := conversation.NewFS(filepath.Join(home, "conversations"))
	m, files, err := store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if m.Budget != 5000 {
		t.Errorf("stored budget %d, want 5000", m.Budget)
	}
	a := harness.MeteredUsage{Requests: 2, ReasoningTokens: 7, Usage: harness.Usage{InputTokens: 1000, OutputTokens: 200, CacheReadTokens: 300, Complete: true}}
	b := harness.MeteredUsage{Requests: 1, Usage: harness.Usage{InputTokens: 50, OutputTokens: 10, Complete: true}}
	m.Metered = &harness.Metered{MeteredUsage: a.Add(b), ByModel: map[string]harness.MeteredUsage{"big": a, "small": b}}
	if err := store.Put(context.Background(), m, files); err != nil {
		t.Fatal(err)
	}
	_, text, _ := run(t, home, wd, "usage", id)
	for _, want := range []string{
		"  metered: 3 requests, in 1050, out 210, cache read 300, write 0, reasoning 7\n",
		"    big: 2 requests, in 1000, out 200, cache read 300, write 0, reasoning 7\n",
		"    small: 1 request, in 50, out 10\n",
		"  budget: 5000 tokens, 3440 left\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("usage lacks %q:\n%s", want, text)
		}
	}
	_, js, _ := run(t, home, wd, "usage", "--json", id)
	var got struct {
		Budget     int64           `json:"budget"`
		BudgetLeft int64           `json:"budget_left"`
		Metered    harness.Metered `json:"metered"`
	}
	if err := json.Unmarshal([]byte(js), &got); err != nil {
		t.Fatalf("%v: %s", err, js)
	}
	if got.Budget != 5000 || got.BudgetLeft != 3440 {
		t.Errorf("budget %d, left %d", got.Budget, got.BudgetLeft)
	}
	if diff := cmp.Diff(*m.Metered, got.Metered); diff != "" {
		t.Errorf("metered (-want +got):\n%s", diff)
	}
}

// TestBudgetFlags: negative budgets are usage errors; a bad
// --token-limit too.
func TestBudgetFlags(t *testing.T) {
	home, wd := t.TempDir(), t.TempDir()
	for _, args := range [][]string{
		{"run", "--max-tokens", "-1", "x"},
		{"run", "--budget", "-5", "x"},
		{"serve", "--token-limit", "ci=abc/1"},
		{"serve", "--token-limit", "=1/1"},
	} {
		if code, _, errOut := run(t, home, wd, args...); code != 2 {
			t.Errorf("%v: exit %d (%s), want 2", args, code, errOut)
		}
	}
}
