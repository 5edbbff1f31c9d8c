package turnstore_test

import (
	"testing"

	"github.com/outposthq/outpost/turnstore"
	"github.com/outposthq/outpost/turnstore/turnstoretest"
)

func TestMemoryConformance(t *testing.T) {
	turnstoretest.Run(t, func(*testing.T) turnstore.Store { return turnstore.NewMemory() })
}
