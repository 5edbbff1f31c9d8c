package storeops_test

import (
	"testing"

	"github.com/outposthq/outpost/internal/storeops"
)

func TestCount(t *testing.T) {
	before := storeops.Total("test-a")
	storeops.Count("test-a", "get")
	storeops.Count("test-a", "get")
	storeops.Count("test-a", "put")
	storeops.Count("test-b", "get")
	if got := storeops.Total("test-a") - before; got != 3 {
		t.Errorf("Total(test-a) grew by %d, want 3", got)
	}
	var seen []string
	for _, o := range storeops.All() {
		if o.Store == "test-a" || o.Store == "test-b" {
			seen = append(seen, o.Store+"/"+o.Op)
		}
	}
	if want := "test-a/get test-a/put test-b/get"; len(seen) != 3 || seen[0]+" "+seen[1]+" "+seen[2] != want {
		t.Errorf("All gives %v, want %s, in that order", seen, want)
	}
}
