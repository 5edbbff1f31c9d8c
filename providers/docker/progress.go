package docker

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"time"

	"github.com/docker/docker/pkg/jsonmessage"

	"github.com/outposthq/outpost/sandbox/driver"
)

// imageProgress follows the JSON message stream of an image pull, import
// or build (the engine's jsonmessage format: one object per status line,
// a layer's lines carrying its id) and folds it into driver.Progress
// reports: the layers named and those in place, the bytes downloaded of
// the sizes known. It reports when the step starts, then at most once an
// interval while messages come, then once more, Done, when the stream
// ended without an error. A nil report only reads the stream.
type imageProgress struct {
	p        driver.Progress
	layers   map[string]*layerState
	report   func(driver.Progress)
	interval time.Duration
	now      func() time.Time // the clock; nil: time.Now
	last     time.Time        // when the last report was sent
	pending  bool             // a change not yet reported
}

// layerState is one layer of a pull as its messages tell it.
type layerState struct {
	size, got int64
	done      bool
}

func newImageProgress(step, ref string, report func(driver.Progress)) *imageProgress {
	return &imageProgress{p: driver.Progress{Step: step, Image: ref}, layers: map[string]*layerState{},
		report: report, interval: driver.ProgressInterval}
}

func (a *imageProgress) clock() time.Time {
	if a.now != nil {
		return a.now()
	}
	return time.Now()
}

func (a *imageProgress) send() {
	if a.report != nil {
		a.report(a.p)
	}
	a.last, a.pending = a.clock(), false
}

// follow reads the stream to its end: the first report at once, the last
// when it ended well. It returns the error the engine reported in the
// stream (an errorDetail), or the stream's own.
func (a *imageProgress) follow(r io.Reader) error {
	a.send()
	dec := json.NewDecoder(r)
	for {
		var m jsonmessage.JSONMessage
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return err
		}
		if m.Error != nil {
			return m.Error
		}
		if a.feed(m) {
			a.pending = true
		}
		if a.pending && a.clock().Sub(a.last) >= a.interval {
			a.send()
		}
	}
	a.p.Done = true
	a.send()
	return nil
}

// feed folds one message into the progress and reports whether it
// changed. Lines without an id ("Digest: …", "Status: …", a build's
// output) and the repository's own line ("Pulling from library/node",
// whose id is the tag) name no layer.
func (a *imageProgress) feed(m jsonmessage.JSONMessage) bool {
	if m.ID == "" || strings.HasPrefix(m.Status, "Pulling from ") {
		return false
	}
	l := a.layers[m.ID]
	if l == nil {
		l = &layerState{}
		a.layers[m.ID] = l
	}
	var cur, total int64
	if m.Progress != nil {
		cur, total = m.Progress.Current, m.Progress.Total
	}
	switch m.Status {
	case "Downloading":
		if total > 0 {
			l.size = total
		}
		l.got = cur
	case "Verifying Checksum", "Download complete", "Extracting":
		// Extracting counts the compressed bytes read: its total is the
		// layer's download size, for a layer too small to show its
		// download.
		if l.size == 0 && total > 0 {
			l.size = total
		}
		l.got = l.size
	case "Pull complete", "Already exists":
		l.got, l.done = l.size, true
	}
	return a.sum()
}

// sum recomputes the totals from the layers and reports whether they
// changed.
func (a *imageProgress) sum() bool {
	p := a.p
	p.Layers, p.LayersDone, p.Bytes, p.Total = len(a.layers), 0, 0, 0
	for _, l := range a.layers {
		if l.done {
			p.LayersDone++
		}
		p.Bytes += l.got
		p.Total += l.size
	}
	changed := p != a.p
	a.p = p
	return changed
}
