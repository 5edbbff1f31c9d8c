package server_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outposthq/outpost/conversation"
)

// TestConversationPages: GET /v1/conversations?limit=N gives one page of
// the client's own conversations, newest first, and the cursor of the
// next; following the cursors gives each once, the last page without
// one. Without limit and after, the whole list as before. Bad limits and
// cursors are 400.
func TestConversationPages(t *testing.T) {
	ts := start(t, nil)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var want []string
	for i := range 7 {
		m := conversation.Meta{ID: fmt.Sprintf("c01page%02d", i), Agent: "echo", Native: fmt.Sprintf("n%d", i), Workdir: "/w", Sandbox: "local",
			Created: at, Updated: at.Add(time.Duration(i) * time.Minute), Owner: "token:test"}
		if i == 3 {
			m.Owner = "token:other" // another client's: in no page of this one
		} else {
			want = append(want, m.ID)
		}
		if err := ts.store.Put(t.Context(), m, []conversation.File{{Path: "f", Data: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
	}
	slices.Reverse(want)
	var got []string
	pages, after := 0, ""
	for ; pages < 5; pages++ {
		code, b, _ := ts.do("GET", "/v1/conversations?limit=4"+after, nil)
		var page struct {
			Conversations []conversation.Meta
			Next          string
		}
		if code != 200 || json.Unmarshal(b, &page) != nil || len(page.Conversations) > 4 {
			t.Fatalf("page %d: %d %s", pages, code, b)
		}
		for _, m := range page.Conversations {
			got = append(got, m.ID)
		}
		if page.Next == "" {
			break
		}
		after = "&after=" + page.Next
	}
	if !slices.Equal(got, want) || pages != 1 {
		t.Errorf("pages of 4: %v in %d pages, want %v in 2", got, pages+1, want)
	}
	if code, b, _ := ts.do("GET", "/v1/conversations", nil); code != 200 || strings.Count(string(b), `"id":`) != 6 || strings.Contains(string(b), `"next"`) {
		t.Errorf("the whole list: %d %s", code, b)
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "after=nonsense"} {
		if code, b, _ := ts.do("GET", "/v1/conversations?"+q, nil); code != 400 || !strings.Contains(string(b), `"bad_request"`) {
			t.Errorf("?%s: %d %s, want 400", q, code, b)
		}
	}
}
