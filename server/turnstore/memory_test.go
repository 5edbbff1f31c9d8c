package turnstore_test

import (
	"testing"

	"github.com/outposthq/outpost/server/turnstore"
	"github.com/outposthq/outpost/server/turnstore/turnstoretest"
)

func TestMemoryConformance(t *testing.T) {
	turnstoretest.Run(t, func(*testing.T) turnstore.Store { return turnstore.NewMemory() })
}
