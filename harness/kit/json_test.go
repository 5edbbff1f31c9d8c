package kit

import (
	"testing"
)

func TestGetters(t *testing.T) {
	o := Parse([]byte(` {"s":"x","n":12.9,"big":1e300,"b":true,"o":{"k":1},"a":[{"k":2},3,{"k":4}],"null":null,"r":{"x":"<"}} `))
	if o == nil {
		t.Fatal("Parse failed")
	}
	if o.Str("s") != "x" || o.Str("n") != "" {
		t.Error("Str")
	}
	if n, ok := o.Num("n"); !ok || n != 12 {
		t.Errorf("Num = %d %v", n, ok)
	}
	if _, ok := o.Num("big"); ok {
		t.Error("Num accepted an out-of-range value")
	}
	if f, ok := o.Float("big"); !ok || f != 1e300 {
		t.Error("Float")
	}
	if !o.Flag("b") || o.Flag("s") {
		t.Error("Flag")
	}
	if v, ok := o.Bool("s"); v || ok {
		t.Error("Bool of a string")
	}
	if o.Obj("o") == nil || o.Obj("s") != nil {
		t.Error("Obj")
	}
	if len(o.Objs("a")) != 2 || len(o.Arr("a")) != 3 {
		t.Error("Objs/Arr")
	}
	if !o.Has("s") || o.Has("null") || o.Has("missing") {
		t.Error("Has")
	}
	if o.Raw("null") != nil || string(o.Raw("o")) != `{"k":1}` {
		t.Errorf("Raw = %s", o.Raw("o"))
	}
	for _, bad := range []string{"", "[]", "{", "null", `"x"`} {
		if Parse([]byte(bad)) != nil {
			t.Errorf("Parse(%q) != nil", bad)
		}
	}
}
