package kubernetes

import (
	"testing"

	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/providers/kubernetes/kubetest"
)

func TestMain(m *testing.M) {
	echo.MaybeRun()
	kubetest.Main(m)
}
