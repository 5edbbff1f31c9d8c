package fakeapi

import "testing"

// TestLog: numbers from 1 in arrival order, copies that a later Update
// does not reach, the arrival channel closed by the next Add, and Clear
// starting the numbers again.
func TestLog(t *testing.T) {
	type req struct {
		Seq   int
		Ended string
	}
	var l Log[req]
	a, b := &req{}, &req{}
	l.Add(a, &a.Seq)
	n, arrived := l.Len()
	l.Add(b, &b.Seq)
	select {
	case <-arrived:
	default:
		t.Error("the arrival channel is open after the next Add")
	}
	all := l.All()
	l.Update(func() { a.Ended = "finished" })
	if n != 1 || a.Seq != 1 || b.Seq != 2 || len(all) != 2 || all[0].Ended != "" || l.All()[0].Ended != "finished" {
		t.Errorf("len %d, seqs %d %d, copies %+v then %+v", n, a.Seq, b.Seq, all, l.All())
	}
	l.Clear()
	c := &req{}
	l.Add(c, &c.Seq)
	if n, _ := l.Len(); n != 1 || c.Seq != 1 {
		t.Errorf("after Clear: len %d, seq %d, want 1 and 1", n, c.Seq)
	}
}
