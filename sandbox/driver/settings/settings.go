package settings

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outposthq/outpost"
)

// Kind is the type of a setting's value.
type Kind int

const (
	String   Kind = iota // any text
	Path                 // a file or directory path
	Bool                 // true or false (strconv.ParseBool)
	Int                  // a whole number
	Duration             // a Go duration: 30s, 2m, 1h
	Size                 // bytes, with an optional binary suffix: 512m, 4g, 4Gi
	Quantity             // a decimal number, or thousandths with an m suffix: 1.5, 500m
	Enum                 // one of Key.Values
	Map                  // k=v,k=v
)

var kindNames = map[Kind]string{String: "string", Path: "path", Bool: "bool", Int: "int", Duration: "duration", Size: "size", Quantity: "quantity", Enum: "enum", Map: "map"}

func (k Kind) String() string { return kindNames[k] }

// None is the value that lifts a limit, where a key accepts it (Key.None).
const None = "none"

// Key declares one setting.
type Key struct {
	Name    string
	Kind    Kind
	Values  []string // Enum: the allowed values
	None    bool     // "none" is accepted: no limit (Values reports -1)
	Default string   // what an unset key means, for the docs
	Doc     string   // what the key sets, for the docs
	Note    string   // a provider's remark on a shared key, for its docs
	// Old are former spellings of the key (cpus for cpu): Parse refuses
	// them, naming Name. The kebab-case form of a snake_case name
	// (outpost-image) is refused that way without being listed.
	Old []string
	// OldValues maps former values to current ones (pull if-not-present
	// to missing): Parse refuses them, naming the current value.
	OldValues map[string]string
}

// With returns a copy of the shared key k with a provider's default and
// remark (Note): its own reading of the key.
func (k Key) With(def, note string) Key {
	k.Default, k.Note = def, note
	return k
}

// Only returns a copy of the Enum key k allowing only values.
func (k Key) Only(values ...string) Key {
	k.Values = values
	return k
}

// Set is the settings one provider accepts.
type Set struct {
	Provider string // for messages: "docker"
	Keys     []Key
}

// Key returns the declaration of name.
func (s Set) Key(name string) (Key, bool) {
	for _, k := range s.Keys {
		if k.Name == name {
			return k, true
		}
	}
	return Key{}, false
}

// Names lists the keys, sorted.
func (s Set) Names() []string {
	names := make([]string, len(s.Keys))
	for i, k := range s.Keys {
		names[i] = k.Name
	}
	slices.Sort(names)
	return names
}

// Decoder returns a provider's ParseSettings: it parses settings with s
// and builds the provider's options from the values with build. An error
// from build (a value the keys' kinds cannot judge) is returned as it is;
// make it with s.Invalid.
func Decoder[O any](s Set, build func(Values) (O, error)) func(settings map[string]string) (O, error) {
	return func(settings map[string]string) (O, error) {
		v, err := s.Parse(settings)
		if err != nil {
			var zero O
			return zero, err
		}
		return build(v)
	}
}

// Values are parsed settings. A getter returns the zero value for a key
// that was not given, -1 for "none"; it panics for a key the Set does not
// declare with that kind (a programming error the provider's tests catch).
type Values struct {
	set  Set
	vals map[string]any
}

// Has reports whether name was given.
func (v Values) Has(name string) bool {
	v.key(name, -1)
	_, ok := v.vals[name]
	return ok
}

func (v Values) key(name string, kinds ...Kind) {
	k, ok := v.set.Key(name)
	if !ok {
		panic(fmt.Sprintf("settings: %s does not declare %q", v.set.Provider, name))
	}
	if kinds[0] != -1 && !slices.Contains(kinds, k.Kind) {
		panic(fmt.Sprintf("settings: %s declares %q as %v", v.set.Provider, name, k.Kind))
	}
}

func get[T any](v Values, name string, kinds ...Kind) T {
	v.key(name, kinds...)
	t, _ := v.vals[name].(T)
	return t
}

// String returns a String, Path or Enum setting.
func (v Values) String(name string) string { return get[string](v, name, String, Path, Enum) }

// Bool returns a Bool setting.
func (v Values) Bool(name string) bool { return get[bool](v, name, Bool) }

// Int returns an Int or Size setting.
func (v Values) Int(name string) int64 { return get[int64](v, name, Int, Size) }

// Duration returns a Duration setting.
func (v Values) Duration(name string) time.Duration {
	return get[time.Duration](v, name, Duration)
}

// Quantity returns a Quantity setting.
func (v Values) Quantity(name string) float64 { return get[float64](v, name, Quantity) }

// Map returns a Map setting.
func (v Values) Map(name string) map[string]string {
	return get[map[string]string](v, name, Map)
}

// Parse checks settings against the declarations and returns their typed
// values. Errors are *outpost.Error values of code configuration, op
// sandbox, naming the key (Details["setting"]).
func (s Set) Parse(settings map[string]string) (Values, error) {
	v := Values{set: s, vals: map[string]any{}}
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		k, ok := s.Key(name)
		if !ok {
			return Values{}, s.unknown(name)
		}
		val, err := k.parse(settings[name])
		if err != nil {
			return Values{}, s.fail(name, "setting %s=%q: %s", name, settings[name], err)
		}
		v.vals[name] = val
	}
	return v, nil
}

// Invalid is the error of a value the provider itself refuses after
// Parse (a check of its own): configuration, naming the key.
func (s Set) Invalid(name, value string, err error) error {
	return s.fail(name, "setting %s=%q: %w", name, value, err)
}

func (s Set) fail(name, format string, a ...any) error {
	e := outpost.Errorf(outpost.Configuration, "sandbox", s.Provider+": "+format, a...)
	return e.Detail("setting", name)
}

// unknown explains a key that is not declared: a former spelling, a
// misspelling, or neither.
func (s Set) unknown(name string) error {
	for _, k := range s.Keys {
		if slices.Contains(k.Old, name) || strings.ReplaceAll(k.Name, "_", "-") == name && strings.Contains(name, "-") {
			return s.fail(name, "setting %q is now spelt %q", name, k.Name)
		}
	}
	known := strings.Join(s.Names(), ", ")
	if near := s.nearest(name); near != "" {
		return s.fail(name, "unknown setting %q (did you mean %s?); known: %s", name, near, known)
	}
	return s.fail(name, "unknown setting %q; known: %s", name, known)
}

// nearest is the declared key closest to name, if it is close: at most two
// edits (one for names of up to four letters).
func (s Set) nearest(name string) string {
	best, bestD := "", 3
	for _, k := range s.Keys {
		limit := 2
		if len(k.Name) <= 4 {
			limit = 1
		}
		if d := distance(name, k.Name); d <= limit && d < bestD {
			best, bestD = k.Name, d
		}
	}
	return best
}

// distance is the optimal string alignment distance of a and b: insertions,
// deletions, substitutions and transpositions of neighbours each cost one.
func distance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// parse reads one value of k.
func (k Key) parse(s string) (any, error) {
	if k.None && s == None {
		switch k.Kind {
		case Duration:
			return time.Duration(-1), nil
		case Quantity:
			return float64(-1), nil
		default:
			return int64(-1), nil
		}
	}
	orNone := ""
	if k.None {
		orNone = " (none for no limit)"
	}
	switch k.Kind {
	case Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, fmt.Errorf("not true or false")
		}
		return b, nil
	case Int:
		n, err := strconv.ParseInt(s, 10, 64)
		return positive(n, err, "a whole number", orNone)
	case Size:
		n, err := parseSize(s)
		return positive(n, err, "a size such as 512m or 4g", orNone)
	case Quantity:
		q, err := parseQuantity(s)
		return positive(q, err, "a number such as 1.5 or 500m", orNone)
	case Duration:
		d, err := time.ParseDuration(s)
		return positive(d, err, "a duration such as 30s or 2m", orNone)
	case Enum:
		return k.enum(s)
	case Map:
		return parseMap(s)
	}
	if s == "" {
		return nil, fmt.Errorf("empty")
	}
	return s, nil
}

func positive[T int64 | float64 | time.Duration](n T, err error, what, orNone string) (any, error) {
	if err != nil {
		return nil, fmt.Errorf("not %s%s", what, orNone)
	}
	if !(n > 0) { // NaN too
		return nil, fmt.Errorf("must be positive%s", orNone)
	}
	return n, nil
}

func (k Key) enum(s string) (any, error) {
	if slices.Contains(k.Values, s) {
		return s, nil
	}
	if now, ok := k.OldValues[s]; ok {
		return nil, fmt.Errorf("%s is now spelt %s", s, now)
	}
	return nil, fmt.Errorf("not one of %s", strings.Join(k.Values, ", "))
}

// parseSize reads bytes: a number with an optional suffix k, m, g, t (or
// Ki, Mi, Gi, Ti; any case, an optional trailing b), binary units.
func parseSize(s string) (int64, error) {
	t := strings.TrimSuffix(strings.TrimSuffix(strings.ToLower(s), "b"), "i")
	mult := 1.0
	if n := len(t); n > 0 {
		if i := strings.IndexByte("kmgt", t[n-1]); i >= 0 {
			mult = float64(int64(1) << (10 * (i + 1)))
			t = t[:n-1]
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || !(f*mult < 1<<63) {
		return 0, fmt.Errorf("not a size: %q", s)
	}
	return int64(f * mult), nil
}

// parseQuantity reads a decimal number, or thousandths with a trailing m.
func parseQuantity(s string) (float64, error) {
	div := 1.0
	if t, ok := strings.CutSuffix(s, "m"); ok {
		s, div = t, 1000
	}
	f, err := strconv.ParseFloat(s, 64)
	return f / div, err
}

func parseMap(s string) (map[string]string, error) {
	m := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", kv)
		}
		m[k] = v
	}
	return m, nil
}
