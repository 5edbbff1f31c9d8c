package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/outposthq/outpost/internal/layout"
	"github.com/outposthq/outpost/sandbox/driver"
)

const (
	// Container names.
	containerName = "sandbox"
	initName      = "outpost"
	// The init container's own mount of the state volume.
	seedDir = "/seed"
)

// podSpec is the hardened pod of a lease: an init container copies
// outpost's binary from outpostImage into the state volume, then the
// sandbox container runs the shim's init from it.
func (p *Provider) podSpec(s *Sandbox, outpostImage string, o *owner, labels map[string]string) *corev1.Pod {
	opts := p.opts
	yes, no := true, false
	uid, gid := opts.UID, opts.GID
	deadline := int64(opts.MaxLifetime / time.Second)
	grace := int64(1)
	mounts, volumes := podVolumes(s, opts.ReadOnly)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            s.id,
			Labels:          podLabels(s, o, labels),
			Annotations:     map[string]string{AnnotationHost: s.host, AnnotationVersion: version()},
			OwnerReferences: []metav1.OwnerReference{o.ref()},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			ActiveDeadlineSeconds:         &deadline,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			ServiceAccountName:            opts.ServiceAccount,
			NodeSelector:                  opts.NodeSelector,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   &yes,
				RunAsUser:      &uid,
				RunAsGroup:     &gid,
				FSGroup:        &gid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			InitContainers: []corev1.Container{p.initContainer(outpostImage)},
			Containers:     []corev1.Container{p.sandboxContainer(outpostImage, mounts)},
			Volumes:        volumes,
		},
	}
}

// initContainer copies outpost's binary into the state volume and makes
// the state directories.
func (p *Provider) initContainer(outpostImage string) corev1.Container {
	// The state directories: the home's (driver.HomeDirs), TMPDIR and the shim's run directory.
	var dirs []string
	for _, d := range append(driver.HomeDirs("home", "tmp"), "run") {
		dirs = append(dirs, path.Join(seedDir, d))
	}
	secure := p.securityContext()
	yes := true
	secure.ReadOnlyRootFilesystem = &yes
	return corev1.Container{
		Name:            initName,
		Image:           outpostImage,
		ImagePullPolicy: p.pullPolicy(),
		Command:         append([]string{ImageBinary, "sandbox-shim", "install", path.Join(seedDir, "bin/outpost")}, dirs...),
		SecurityContext: secure,
		Resources:       corev1.ResourceRequirements{Limits: p.res.limits, Requests: p.res.requests},
		VolumeMounts:    []corev1.VolumeMount{{Name: "state", MountPath: seedDir}},
	}
}

// sandboxContainer runs the agent's image (default: the outpost image)
// with the shim's init.
func (p *Provider) sandboxContainer(outpostImage string, mounts []corev1.VolumeMount) corev1.Container {
	image := p.opts.Image
	if image == "" {
		image = outpostImage
	}
	return corev1.Container{
		Name:            containerName,
		Image:           image,
		ImagePullPolicy: p.pullPolicy(),
		Command:         []string{layout.BinaryPath, "sandbox-shim", "init"},
		WorkingDir:      layout.Workspace,
		Env:             []corev1.EnvVar{{Name: "PATH", Value: path.Dir(layout.BinaryPath) + ":" + layout.DefaultPath}},
		SecurityContext: p.securityContext(),
		Resources:       corev1.ResourceRequirements{Limits: p.res.limits, Requests: p.res.requests},
		VolumeMounts:    mounts,
	}
}

// pullPolicy is Options.Pull as an imagePullPolicy.
func (p *Provider) pullPolicy() corev1.PullPolicy {
	switch p.opts.Pull {
	case PullNever:
		return corev1.PullNever
	case PullAlways:
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

// securityContext is every container's: non-root, no privilege, no
// capability, the runtime's seccomp profile.
func (p *Provider) securityContext() *corev1.SecurityContext {
	yes, no := true, false
	uid, gid, ro := p.opts.UID, p.opts.GID, p.opts.ReadOnly
	return &corev1.SecurityContext{
		RunAsNonRoot:             &yes,
		RunAsUser:                &uid,
		RunAsGroup:               &gid,
		AllowPrivilegeEscalation: &no,
		Privileged:               &no,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		ReadOnlyRootFilesystem:   &ro,
	}
}

// podLabels are the caller's labels Kubernetes accepts, and the
// provider's.
func podLabels(s *Sandbox, o *owner, labels map[string]string) map[string]string {
	l := map[string]string{}
	for k, v := range labels {
		if validLabel(k, v) {
			l[k] = v
		}
	}
	l[LabelManaged] = managedBy
	l[LabelRole] = "sandbox"
	l[LabelLease] = s.id
	l[LabelOwner] = o.name
	return l
}

// podVolumes are the sandbox container's mounts and the pod's volumes:
// the state and workspace emptyDirs, /tmp when the root is read-only, and
// the node's shared directories (node_cache).
func podVolumes(s *Sandbox, readOnly bool) ([]corev1.VolumeMount, []corev1.Volume) {
	emptyDir := func() corev1.VolumeSource { return corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}} }
	mounts := []corev1.VolumeMount{{Name: "state", MountPath: layout.StateDir}, {Name: "workspace", MountPath: layout.Workspace}}
	volumes := []corev1.Volume{{Name: "state", VolumeSource: emptyDir()}, {Name: "workspace", VolumeSource: emptyDir()}}
	if readOnly {
		mounts = append(mounts, corev1.VolumeMount{Name: "tmp", MountPath: "/tmp"})
		volumes = append(volumes, corev1.Volume{Name: "tmp", VolumeSource: emptyDir()})
	}
	hostPath := corev1.HostPathDirectory
	for i, m := range s.shared {
		name := fmt.Sprintf("node-cache-%d", i)
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: m.Target, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: m.Source, Type: &hostPath}}})
	}
	return mounts, volumes
}

// validLabel keeps caller labels Kubernetes accepts (others are dropped).
func validLabel(k, v string) bool {
	if len(v) > 63 || len(k) > 253 || k == "" {
		return false
	}
	ok := func(s string) bool {
		for _, r := range s {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' || r == '/') {
				return false
			}
		}
		return true
	}
	return ok(k) && ok(v) && strings.Count(k, "/") <= 1
}

// sharedMounts picks the requested host mounts the lease can honor as
// hostPath volumes (Options.NodeCache): absolute sources, clean absolute
// targets outside the provider's own paths.
func sharedMounts(o *Options, req []driver.Mount) []driver.Mount {
	if !o.NodeCache {
		return nil
	}
	var out []driver.Mount
	for _, m := range req {
		if driver.Shareable(m, layout.StateDir, layout.Workspace, "/tmp") {
			out = append(out, driver.Mount{Source: filepath.Clean(m.Source), Target: m.Target})
		}
	}
	return out
}

// Waiting reasons that will not resolve by waiting: the start fails at
// once, naming them.
var hopeless = map[string]bool{
	"ErrImageNeverPull":          true,
	"InvalidImageName":           true,
	"ImagePullBackOff":           true,
	"CreateContainerConfigError": true,
	"CreateContainerError":       true,
	"RunContainerError":          true,
	"CrashLoopBackOff":           true,
}

// pullFailures are the waiting reasons of an image the node cannot get.
var pullFailures = map[string]bool{"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true}

// waitRunning waits until the pod's sandbox container runs (and match,
// when set, accepts the pod), at most until deadline. Errors wrap ErrStart
// with the cause from the pod's status and events, or are ctx's.
func (p *Provider) waitRunning(ctx context.Context, name string, deadline time.Time, match func(*corev1.Pod) bool) (*corev1.Pod, error) {
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	decided := func(pod *corev1.Pod) (bool, error) {
		done, err := p.started(ctx, pod)
		return done && (err != nil || match == nil || match(pod)), err
	}
	pods := p.api.pods
	var last *corev1.Pod
	for {
		pod, err := pods.get(wctx, name)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if wctx.Err() != nil {
				return nil, p.startErr(ctx, last, fmt.Sprintf("not running after %v", p.opts.StartTimeout))
			}
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("%w: pod %s was deleted while starting", ErrStart, name)
			}
			return nil, p.apiErr(ctx, "reading pod "+name, err)
		}
		last = pod
		if done, err := decided(pod); done {
			return pod, err
		}
		w, err := pods.watch(wctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: pod.ResourceVersion})
		if err != nil {
			continue // read again (the deadline ends the loop)
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Deleted {
				w.Stop()
				return nil, fmt.Errorf("%w: pod %s was deleted while starting", ErrStart, name)
			}
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			last = pod
			if done, err := decided(pod); done {
				w.Stop()
				return pod, err
			}
		}
		w.Stop()
	}
}

// started says whether the start is decided: the container runs (nil), or
// it cannot run (an error naming why).
func (p *Provider) started(ctx context.Context, pod *corev1.Pod) (bool, error) {
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return true, p.startErr(ctx, pod, "the pod ended")
	}
	if pod.DeletionTimestamp != nil {
		return true, fmt.Errorf("%w: pod %s is being deleted", ErrStart, pod.Name)
	}
	for _, cs := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && hopeless[w.Reason] {
			return true, p.startErr(ctx, pod, "")
		}
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			return true, p.startErr(ctx, pod, "")
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == containerName && cs.State.Running != nil {
			return true, nil
		}
	}
	return false, nil
}

// startErr builds the error of a pod that did not start: its phase, the
// waiting or terminated reasons of its containers, its unsatisfied
// conditions and its warning events.
func (p *Provider) startErr(ctx context.Context, pod *corev1.Pod, what string) error {
	if pod == nil {
		return fmt.Errorf("%w: %s", ErrStart, what)
	}
	var causes []string
	if what != "" {
		causes = append(causes, what)
	}
	if pod.Status.Reason != "" || pod.Status.Message != "" {
		causes = append(causes, strings.TrimSpace(pod.Status.Reason+": "+pod.Status.Message))
	}
	for _, cs := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		switch {
		case cs.State.Waiting != nil && cs.State.Waiting.Reason != "" && cs.State.Waiting.Reason != "PodInitializing":
			causes = append(causes, fmt.Sprintf("container %s: %s: %s (image %s)", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message, cs.Image))
			if cs.Name == initName && pullFailures[cs.State.Waiting.Reason] {
				causes = append(causes, fmt.Sprintf(ImageHint, cs.Image))
			}
		case cs.State.Terminated != nil && cs.State.Terminated.ExitCode != 0:
			causes = append(causes, fmt.Sprintf("container %s exited %d: %s %s", cs.Name, cs.State.Terminated.ExitCode, cs.State.Terminated.Reason, strings.TrimSpace(cs.State.Terminated.Message)))
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Reason != "" && c.Reason != "PodCompleted" && c.Reason != "ContainersNotReady" && c.Reason != "ContainersNotInitialized" && c.Reason != "PodReadyToStartContainers" {
			causes = append(causes, fmt.Sprintf("%s: %s: %s", c.Type, c.Reason, c.Message))
		}
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var evs corev1.EventList
	if err := p.api.events.list(ectx, metav1.ListOptions{FieldSelector: fields.AndSelectors(
		fields.OneTermEqualSelector("involvedObject.name", pod.Name),
		fields.OneTermEqualSelector("type", corev1.EventTypeWarning)).String()}, &evs); err == nil {
		sort.Slice(evs.Items, func(i, j int) bool { return evs.Items[i].LastTimestamp.Before(&evs.Items[j].LastTimestamp) })
		seen := map[string]bool{}
		for _, e := range evs.Items {
			msg := e.Reason + ": " + e.Message
			if !seen[msg] {
				seen[msg] = true
				causes = append(causes, "event "+msg)
			}
		}
	}
	if len(causes) == 0 {
		causes = append(causes, "phase "+string(pod.Status.Phase))
	}
	return fmt.Errorf("%w: pod %s in namespace %s: %s", ErrStart, pod.Name, p.ns, strings.Join(causes, "; "))
}

// apiErr classifies an API error: forbidden and unauthorized (the
// configuration), unreachable, ctx's, the rest as is.
func (p *Provider) apiErr(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%w: %s in namespace %q: %w; bind the Role of providers/kubernetes/rbac.yaml", ErrForbidden, what, p.ns, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%w: %s: the API server at %s refuses the credentials: %w", ErrConfig, what, p.host, err)
	}
	var ne net.Error
	var oe *net.OpError
	if errors.As(err, &oe) || errors.As(err, &ne) {
		return fmt.Errorf("%w at %s: %s: %w", ErrUnreachable, p.host, what, err)
	}
	return fmt.Errorf("kubernetes: %s: %w", what, err)
}
