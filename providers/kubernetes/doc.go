// Package kubernetes is the sandbox provider whose sandboxes are pods of a
// Kubernetes cluster, driven through client-go's REST client over a
// scheme of only the API groups it uses (api.go; not the clientset, whose
// scheme registers every group at init): the standard loading rules
// (KUBECONFIG, ~/.kube/config, in-cluster), a context and a namespace,
// and exec through remotecommand (WebSocket, falling back to
// SPDY, as kubectl does; SPDY first for a stdin that stays open while its
// program runs, see Provider.executor).
//
// One lease is one pod, kept alive between the lease's turns by outpost's
// own static binary in its sandbox-shim init mode. An init container from
// the outpost image (OutpostImageTar; FROM scratch, only the binary)
// copies the binary into the pod's state volume; the agent's container
// runs the user's image. Inside the pod:
//
//	/outpost/home        the private home (HOME, XDG_*); TMPDIR is /outpost/tmp
//	/outpost/bin/outpost outpost's static binary
//	/workspace           the working directory, copied in and back over exec
//
// /outpost and /workspace are emptyDir volumes. Every process runs under
// the shim's exec mode (exact exit status, its own process group, its
// group killed with it), as a stream of the lease's one serving exec
// (serve.go) or, with Options.ExecEach, as an exec of its own; the
// environment travels on the process's stdin, never on a command line. Files move as tar through the shim's untar and
// tar modes, so an image needs neither a shell nor tar.
//
// Pods are hardened: runAsNonRoot (1000:1000 by default),
// allowPrivilegeEscalation false, every capability dropped, seccomp
// RuntimeDefault, no service account token, CPU, memory and
// ephemeral-storage limits, optionally a read-only root filesystem.
//
// Orphans: each provider holds a coordination.k8s.io Lease that it
// renews, and owns its pods through ownerReferences. Every provider runs
// GC from its first Open until Close, every third of the lease duration
// (SweepPeriod), as `outpost gc --sandbox kubernetes` does on demand: a
// Lease past its renew deadline and a margin is deleted, then its pods
// (the cluster's garbage collector would delete them too), whichever
// machine their outpost ran on, within SweepBound of its death.
// activeDeadlineSeconds is the last net.
//
// The provider registers itself as "kubernetes"; see Settings for the keys
// sandbox.Open accepts and docs/sandboxes/kubernetes.md for the user's
// view (RBAC, security model, limits).
package kubernetes
