// Package kubernetes holds the kubernetes provider's integration tests, on
// the real single-node cluster of scripts/kube-up.sh (started by
// kubetest.Main when none answers): sandboxtest conformance, echo turns,
// conversations crossing docker and kubernetes, a real claude turn in a
// pod, orphans removed by the cluster's garbage collector after outpost is
// killed, vanished pods, pods that cannot start, and configuration errors.
// It is a package of its own so that only it waits for the cluster.
//
// The cluster's packages and binaries are installed by scripts/test.sh
// (scripts/kube-up.sh --prepare); kubetest.Main starts the cluster when
// none answers and stops it after the tests. To keep one running between
// runs:
//
//	scripts/kube-up.sh && OUTPOST_KUBE_KEEP=1 go test ./integration/kubernetes
package kubernetes
