package kit

import (
	"bytes"
	"encoding/json"
	"time"
)

// Details are the machine-readable facts of an event or a failure
// (harness.Event.Details, QuotaDetails): a key is set only when its fact
// is present, so an absent key means "not reported", never a zero value.
type Details map[string]any

// Str sets k to v when v is not empty.
func (d Details) Str(k, v string) {
	if v != "" {
		d[k] = v
	}
}

// Num sets k to v when ok (the second result of Obj.Num).
func (d Details) Num(k string, v int64, ok bool) {
	if ok {
		d[k] = v
	}
}

// Bool sets k to v when ok (the second result of Obj.Bool).
func (d Details) Bool(k string, v, ok bool) {
	if ok {
		d[k] = v
	}
}

// Merge copies src's keys into d, except those in skip.
func (d Details) Merge(src map[string]any, skip ...string) {
next:
	for k, v := range src {
		for _, s := range skip {
			if k == s {
				continue next
			}
		}
		d[k] = v
	}
}

// Strs builds details from key/value pairs, leaving out empty values; nil
// when all are empty.
func Strs(kv ...string) map[string]any {
	d := Details{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Str(kv[i], kv[i+1])
	}
	return d.Map()
}

// Map returns d as a map, or nil when it holds nothing.
func (d Details) Map() map[string]any {
	if len(d) == 0 {
		return nil
	}
	return d
}

// MaxWait bounds the wait ResetsAt accepts: a CLI that names a reset
// further away than a year is not telling a reset time.
const MaxWait = 366 * 24 * time.Hour

// ResetsAt is the "resets_at" detail of a usage limit whose message says
// to wait for wait from from: RFC 3339 in UTC, rounded up to the whole
// second (never before the reset). It is "" for a negative wait or one
// over MaxWait.
func ResetsAt(from time.Time, wait time.Duration) string {
	if wait < 0 || wait > MaxWait {
		return ""
	}
	at := from.Add(wait).UTC()
	if at.Nanosecond() != 0 {
		at = at.Truncate(time.Second).Add(time.Second)
	}
	return at.Format(time.RFC3339)
}

// Marshal encodes v as JSON the way the CLIs print it: HTML characters
// as they are, no trailing newline. It returns nil for a value that cannot
// be encoded.
func Marshal(v any) json.RawMessage {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		return nil
	}
	return json.RawMessage(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}
