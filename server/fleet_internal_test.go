package server

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/turnstore"
)

// TestMergeEvents: a batch's event writes are joined per turn, never
// across another write of the same turn.
func TestMergeEvents(t *testing.T) {
	ev := func(id string, seq int64) fleetOp {
		return fleetOp{id: id, events: []turnstore.Event{{Seq: seq}}}
	}
	fin := fleetOp{id: "a", result: &turnstore.Event{Seq: 4}}
	start := fleetOp{id: "b", start: time.Unix(1, 0)}
	got := mergeEvents([]fleetOp{ev("a", 1), ev("b", 1), ev("a", 2), start, ev("b", 2), ev("a", 3), fin, ev("b", 3)})
	type w struct {
		id   string
		seqs []int64
		kind string
	}
	var out []w
	for _, o := range got {
		x := w{id: o.id, kind: "events"}
		switch {
		case o.result != nil:
			x.kind = "result"
		case !o.start.IsZero():
			x.kind = "start"
		}
		for _, e := range o.events {
			x.seqs = append(x.seqs, e.Seq)
		}
		out = append(out, x)
	}
	want := []w{{"a", []int64{1, 2, 3}, "events"}, {"b", []int64{1}, "events"}, {"b", nil, "start"}, {"b", []int64{2, 3}, "events"}, {"a", nil, "result"}}
	if d := cmp.Diff(want, out, cmp.AllowUnexported(w{})); d != "" {
		t.Errorf("merged (-want +got):\n%s", d)
	}
}
