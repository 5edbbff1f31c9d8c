package sandbox

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/sandbox/driver"
)

// ImageNoticeKind is the Kind of the notice events of an image pull or
// build (ProgressEvent).
const ImageNoticeKind = "image"

// ProgressText is an image pull's or build's progress for people:
// "pulling node:22-bookworm: 93.1 MB of 186.1 MB (50%), 3 of 7 layers".
func ProgressText(p driver.Progress) string {
	if p.Step == driver.ProgressBuild {
		if p.Done {
			return "built " + p.Image
		}
		return "building " + p.Image
	}
	if p.Done {
		return fmt.Sprintf("pulled %s (%s, %s downloaded)", p.Image, layers(p.Layers), bootstrap.Size(p.Bytes))
	}
	s := "pulling " + p.Image
	if p.Layers == 0 {
		return s
	}
	s += ": "
	if p.Total > 0 {
		s += fmt.Sprintf("%s of %s (%d%%), ", bootstrap.Size(p.Bytes), bootstrap.Size(p.Total), int(100*ProgressFraction(p)))
	}
	return s + fmt.Sprintf("%d of %s", p.LayersDone, layers(p.Layers))
}

// ProgressFraction is Bytes/Total in [0,1], or -1 when no size is known
// yet.
func ProgressFraction(p driver.Progress) float64 {
	if p.Total <= 0 {
		return -1
	}
	return min(max(float64(p.Bytes)/float64(p.Total), 0), 1)
}

// ProgressEvent is p as a notice event of kind "image", the form a turn's
// events carry (`outpost run --json`): its text ProgressText, its details
// p's fields (step, image, layers, layers_done, bytes, total, done).
func ProgressEvent(p driver.Progress) harness.Event {
	var d map[string]any
	b, _ := json.Marshal(p) // plain fields: cannot fail
	_ = json.Unmarshal(b, &d)
	return harness.Event{Type: harness.EventNotice, Kind: ImageNoticeKind, Text: ProgressText(p), Details: d, Time: time.Now().UTC()}
}

// ProgressFromEvent reads back an image notice's progress (its Details
// as made by ProgressEvent, or as decoded from JSON).
func ProgressFromEvent(ev harness.Event) (driver.Progress, bool) {
	var p driver.Progress
	if ev.Type != harness.EventNotice || ev.Kind != ImageNoticeKind || ev.Details == nil {
		return p, false
	}
	b, err := json.Marshal(ev.Details)
	if err != nil || json.Unmarshal(b, &p) != nil {
		return driver.Progress{}, false
	}
	return p, p.Step != ""
}

func layers(n int) string {
	if n == 1 {
		return "1 layer"
	}
	return fmt.Sprintf("%d layers", n)
}
