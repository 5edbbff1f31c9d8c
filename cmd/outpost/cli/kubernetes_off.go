//go:build nokubernetes

package cli

import (
	"github.com/spf13/cobra"

	"github.com/outposthq/outpost"
)

// kubernetesCmd of a build without the kubernetes provider (-tags
// nokubernetes: the Kubernetes client is most of what a first build
// compiles) says how to get it.
func (a *app) kubernetesCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "kubernetes",
		Short:  "Prepare a cluster for the kubernetes sandbox (not in this build)",
		Hidden: true,
		RunE: func(*cobra.Command, []string) error {
			return outpost.Errorf(outpost.Configuration, "kubernetes", "this outpost was built with -tags nokubernetes; build it without the tag (go install ./cmd/outpost) for the kubernetes sandbox")
		},
	}
}
