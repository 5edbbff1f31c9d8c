package server_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outposthq/outpost/turnstore"
)

// gatedTurns is a turn store whose Create waits until another Create is
// in flight beside it (or, once, a bound): it records how many writes of
// the store a replica had in flight at most.
type gatedTurns struct {
	*turnstore.Memory
	mu       sync.Mutex
	inFlight int
	most     int
	two      chan struct{} // closed when two were in flight
	gaveUp   bool
}

func (g *gatedTurns) Create(ctx context.Context, t turnstore.Turn) error {
	g.mu.Lock()
	g.inFlight++
	if g.inFlight > g.most {
		g.most = g.inFlight
		if g.most == 2 {
			close(g.two)
		}
	}
	wait := !g.gaveUp
	g.mu.Unlock()
	if wait {
		select {
		case <-g.two:
		case <-time.After(3 * time.Second): // a bound, not a measure: then never again
			g.mu.Lock()
			g.gaveUp = true
			g.mu.Unlock()
		}
	}
	g.mu.Lock()
	g.inFlight--
	g.mu.Unlock()
	return g.Memory.Create(ctx, t)
}

// TestFleetWritesInParallel: a replica writes the records of different
// turns to the turn store at once, not one after the other: 8 turns
// started together have two creates in flight. One writer for the whole
// replica made each turn's every write wait for all the others' (on
// PostgreSQL, seconds to a turn's first event under load).
func TestFleetWritesInParallel(t *testing.T) {
	g := &gatedTurns{Memory: turnstore.NewMemory(), two: make(chan struct{})}
	a := fleetOf(t, g, "a")[0]
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := a.startTurn(map[string]any{"prompt": fmt.Sprintf("turn %d", i)})
			a.wait(st.ID)
		}()
	}
	wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.most < 2 {
		t.Errorf("at most %d write of the turn store in flight for 8 turns started at once, want several", g.most)
	}
}
