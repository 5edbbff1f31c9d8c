// Package kubernetes holds the kubernetes provider's integration tests, on
// the real single-node cluster of scripts/kube-up.sh (started by the
// first kubetest.Require when none answers): sandboxtest conformance, echo turns,
// conversations crossing docker and kubernetes, a real claude turn in a
// pod, orphans removed by the cluster's garbage collector after outpost is
// killed, vanished pods, pods that cannot start, and configuration errors.
// It is a package of its own so that only it waits for the cluster.
// Its tests mostly wait on pods, so they run beside each other, each in a
// namespace of its own (kubetest.Parallel), and scripts/test.sh runs the
// package beside the others with -parallel 6.
//
// The cluster's packages and binaries are installed by scripts/test.sh
// (scripts/kube-up.sh --prepare); the first test that needs the cluster
// starts it when none answers (kubetest.Require), and kubetest.Main stops
// it after the tests; a run that needs none (go test -run '^Example')
// starts none. To keep one running between runs:
//
//	scripts/kube-up.sh && OUTPOST_KUBE_KEEP=1 go test ./integration/kubernetes
package kubernetes
