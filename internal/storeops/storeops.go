// Package storeops counts the store operations of this process: each
// call of a conversation store's, a turn store's or an object store's
// method (conversation.FS, conversation/postgres, checkpoint.Dir), by
// store and operation. `outpost serve` exports the counts as
// outpost_store_operations_total, and the load harness (cmd/outpost-load)
// divides them by the turns it ran: a count that grows with the store, not
// with the turn, is a whole-store scan.
//
// The counts are process-wide (a process normally opens one store) and
// the label values are the constant strings the stores pass: bounded.
package storeops

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

var counts sync.Map // "store\x00op" → *atomic.Uint64

// Count records one operation op of store.
func Count(store, op string) {
	k := store + "\x00" + op
	v, ok := counts.Load(k)
	if !ok {
		v, _ = counts.LoadOrStore(k, new(atomic.Uint64))
	}
	v.(*atomic.Uint64).Add(1)
}

// Op is one operation's count.
type Op struct {
	Store, Op string
	N         uint64
}

// All returns every count so far, sorted by store and operation.
func All() []Op {
	var out []Op
	counts.Range(func(k, v any) bool {
		s, op, _ := strings.Cut(k.(string), "\x00")
		out = append(out, Op{Store: s, Op: op, N: v.(*atomic.Uint64).Load()})
		return true
	})
	slices.SortFunc(out, func(a, b Op) int {
		if c := strings.Compare(a.Store, b.Store); c != 0 {
			return c
		}
		return strings.Compare(a.Op, b.Op)
	})
	return out
}

// Total is the sum of the counts of store ("" for every store).
func Total(store string) uint64 {
	var n uint64
	for _, o := range All() {
		if store == "" || o.Store == store {
			n += o.N
		}
	}
	return n
}
