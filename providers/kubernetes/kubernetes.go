package kubernetes

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/outposthq/outpost/internal/selfbin"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/driver/settings"
)

// Errors of the provider, wrapped with the details.
var (
	// ErrConfig: no usable cluster configuration (kubeconfig, context,
	// namespace, in-cluster environment) or an Options value New refuses
	// (a malformed --set value is refused earlier, by Settings.Parse).
	ErrConfig = errors.New("kubernetes: bad configuration")
	// ErrForbidden: the cluster refuses the user something the provider
	// needs (RBAC); docs/sandboxes/kubernetes.md ships a minimal Role.
	ErrForbidden = errors.New("kubernetes: forbidden")
	// ErrUnreachable: the cluster's API server does not answer; it is
	// also driver.ErrUnreachable.
	ErrUnreachable = driver.Unreachable("kubernetes: the API server does not answer")
	// ErrStart: the lease's pod could not start (image missing,
	// unschedulable, quota exceeded...); the error names the cause.
	ErrStart = errors.New("kubernetes: the sandbox's pod did not start")
)

// Defaults of Options.
const (
	DefaultUID           = 1000
	DefaultGID           = 1000
	DefaultCPU           = "2"
	DefaultMemory        = "4Gi"
	DefaultCPURequest    = "100m"
	DefaultMemoryRequest = "128Mi"
	DefaultStorage       = "10Gi"
	DefaultStartTimeout  = 2 * time.Minute
	DefaultLeaseDuration = 60 * time.Second
	DefaultMaxLifetime   = 24 * time.Hour
)

// PullPolicy is the pod's imagePullPolicy.
type PullPolicy string

const (
	PullMissing PullPolicy = "missing" // IfNotPresent, the default
	PullNever   PullPolicy = "never"
	PullAlways  PullPolicy = "always"
)

// Options configure the provider. The zero value is ready to use.
type Options struct {
	// Kubeconfig is the kubeconfig file. Default: client-go's loading
	// rules ($KUBECONFIG, ~/.kube/config), then the in-cluster
	// configuration of a pod's service account.
	Kubeconfig string
	// Context is the kubeconfig context; default its current context.
	Context string
	// Namespace of the pods and Leases; default the context's, then
	// the in-cluster pod's, then "default".
	Namespace string
	// Image is the agent's image. Default: OutpostImage (outpost's binary
	// FROM scratch: enough for the echo agent and static CLIs).
	Image string
	// OutpostImage is the image whose ImageBinary is a static outpost binary
	// for the nodes' architecture (WriteOutpostImage builds it); an init
	// container copies the binary into each pod. Default:
	// outpost/outpost:<12 hex of the binary's SHA-256>.
	OutpostImage string
	// Pull is the pods' imagePullPolicy; default PullMissing.
	Pull PullPolicy
	// ServiceAccount runs the pods under this service account (its token
	// is still not mounted). Default: the namespace's default.
	ServiceAccount string
	// NodeSelector restricts the nodes the pods run on.
	NodeSelector map[string]string
	// UID and GID the processes run as; default 1000:1000 (never 0:
	// runAsNonRoot).
	UID, GID int64
	// CPU and Memory are the container's limits, CPURequest and
	// MemoryRequest its requests, Storage its ephemeral-storage limit
	// (the emptyDirs count against it); Kubernetes quantities ("2",
	// "500m", "4Gi"). "none" removes a limit. Defaults: the Default*
	// constants.
	CPU, Memory, CPURequest, MemoryRequest, Storage string
	// ReadOnly makes the root filesystem read-only; /tmp is then an
	// emptyDir (home and workspace are volumes anyway).
	ReadOnly bool
	// StartTimeout bounds the wait for a pod to run (scheduling, image);
	// default DefaultStartTimeout.
	StartTimeout time.Duration
	// LeaseDuration is the owner Lease's duration: it is renewed every
	// third of it, and another outpost may delete it (and so its pods)
	// once it has not been renewed for that long. Default
	// DefaultLeaseDuration.
	LeaseDuration time.Duration
	// MaxLifetime is each pod's activeDeadlineSeconds, the last net
	// against orphans; default DefaultMaxLifetime.
	MaxLifetime time.Duration
	// NodeCache honors driver.Options.Mounts (the bootstrap cache) as
	// read-only hostPath volumes: only right when the host directories
	// exist on the nodes with the same content (outpost runs on the node,
	// or the tree is provisioned there). See docs/sandboxes/kubernetes.md.
	NodeCache bool
	// Binary is a static outpost binary for the nodes (for the default
	// OutpostImage's tag). Default: selfbin.LocateOrBuild.
	Binary string
	// Arch is the nodes' architecture (GOARCH name); default the host's.
	Arch string
	// ExecEach runs every process of a lease (and every copy, signal and
	// lookup) as an exec of its own through the API server and the
	// kubelet, instead of as a stream of the lease's one serving exec
	// (docs/sandboxes/kubernetes.md): for a path to the cluster that ends
	// long-lived connections.
	ExecEach bool
	// Via is how a lease gets its pod: ViaPod (the default) makes one;
	// ViaAgentSandbox claims one from kubernetes-sigs/agent-sandbox (a
	// SandboxClaim against Template, served from its SandboxWarmPool;
	// claim.go, docs/sandboxes/kubernetes.md).
	Via Via
	// Template is the SandboxTemplate of ViaAgentSandbox (required there;
	// Provider.SandboxTemplate makes one outpost's shim can run in).
	Template string
	// WarmPool is the SandboxWarmPool the claims name; default the one of
	// the namespace whose sandboxTemplateRef is Template.
	WarmPool string
	// ClientLogs leaves client-go's process-wide klog logger as the
	// program set it. By default New discards it: client-go logs through
	// klog, on stderr, errors the provider already reports through its
	// own (for example "use of closed network connection" after every
	// WebSocket exec), which would interleave with a turn's output.
	ClientLogs bool
}

// Via is Options.Via.
type Via string

const (
	ViaPod          Via = "pod"           // a pod of the provider's own per lease
	ViaAgentSandbox Via = "agent-sandbox" // a SandboxClaim per lease
)

// quietClientOnce discards client-go's klog output once per process.
var quietClientOnce sync.Once

// Settings declares the keys sandbox.Open("kubernetes", settings) accepts
// (docs/sandboxes/kubernetes.md shows them, generated from here).
var Settings = settings.Set{Provider: "kubernetes", Keys: []settings.Key{
	{Name: "kubeconfig", Kind: settings.Path, Default: "$KUBECONFIG", Doc: "the kubeconfig file (then `~/.kube/config`, then the in-cluster configuration)"},
	{Name: "context", Kind: settings.String, Doc: "the kubeconfig context (default: its current one)"},
	{Name: "namespace", Kind: settings.String, Doc: "the pods' and Leases' namespace (default: the context's, the pod's, `default`)"},
	settings.Image.With("outpost_image", "the agent's image; the default holds only outpost's binary (the echo agent, static CLIs)"),
	{Name: "outpost_image", Kind: settings.String, Default: "outpost/outpost:<12 hex>", Doc: "the image whose `/usr/local/bin/outpost` is a static outpost binary (below)"},
	settings.Pull.With("missing", "the pods' `imagePullPolicy`: `IfNotPresent`, `Never`, `Always`"),
	{Name: "service_account", Kind: settings.String, Doc: "the pods' service account (its token is never mounted; default: the namespace's)"},
	{Name: "node_selector", Kind: settings.Map, Doc: "`k=v,k=v`: the nodes pods may run on"},
	settings.User.With("1000:1000", "`uid[:gid]`, never 0"),
	settings.CPU.With(DefaultCPU, "the container's limit"),
	settings.Memory.With("4Gi", "the container's limit"),
	{Name: "cpu_request", Kind: settings.Quantity, None: true, Default: DefaultCPURequest, Doc: "the container's CPU request"},
	{Name: "memory_request", Kind: settings.Size, None: true, Default: DefaultMemoryRequest, Doc: "the container's memory request"},
	{Name: "ephemeral_storage", Kind: settings.Size, None: true, Default: DefaultStorage, Doc: "ephemeral-storage limit (the home and workspace `emptyDir`s count against it)"},
	settings.ReadOnly.With("false", "`/tmp` is then an `emptyDir`"),
	settings.StartTimeout.With("2m", "a pod's start: scheduling, image, init"),
	{Name: "lease_duration", Kind: settings.Duration, Default: "60s", Doc: "the owner Lease's duration (renewed every third of it)"},
	{Name: "max_lifetime", Kind: settings.Duration, Default: "24h", Doc: "every pod's `activeDeadlineSeconds`"},
	{Name: "node_cache", Kind: settings.Bool, Default: "false", Doc: "mount the bootstrap cache from the node (below)"},
	settings.Binary.With("", "for the default `outpost_image`'s tag"),
	{Name: "arch", Kind: settings.String, Default: "the host's", Doc: "the nodes' architecture (`amd64`, `arm64`)"},
	{Name: "via", Kind: settings.Enum, Values: []string{string(ViaPod), string(ViaAgentSandbox)}, Default: string(ViaPod), Doc: "`pod`: a pod of outpost's own per lease; `agent-sandbox`: a `SandboxClaim` per lease (below)"},
	{Name: "template", Kind: settings.String, Doc: "with `via=agent-sandbox` (required): the `SandboxTemplate` the claims are served from"},
	{Name: "warm_pool", Kind: settings.String, Doc: "with `via=agent-sandbox`: the `SandboxWarmPool` the claims name (default: the namespace's pool of `template`)"},
	{Name: "exec_each", Kind: settings.Bool, Default: "false", Doc: "every process an exec of its own, not a stream of the lease's serving exec (below)"},
}}

func init() {
	driver.Register("kubernetes", func(settings map[string]string) (driver.Provider, error) {
		opts, err := ParseSettings(settings)
		if err != nil {
			return nil, err
		}
		p, err := New(opts)
		if err != nil {
			return nil, err
		}
		// sandbox.Open reports a factory's error as configuration: find
		// here what the user must fix (RBAC), not mid-turn.
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := p.Preflight(ctx); err != nil && !errors.Is(err, ErrUnreachable) {
			return nil, err
		}
		return p, nil
	})
}

// ParseSettings turns sandbox.Open's string settings into Options.
var ParseSettings = settings.Decoder(Settings, options)

// options builds Options from parsed settings.
func options(v settings.Values) (*Options, error) {
	o := &Options{
		Kubeconfig: v.String("kubeconfig"), Context: v.String("context"), Namespace: v.String("namespace"),
		Image: v.String("image"), OutpostImage: v.String("outpost_image"), Pull: PullPolicy(v.String("pull")),
		ServiceAccount: v.String("service_account"), NodeSelector: v.Map("node_selector"),
		CPU: cpu(v, "cpu"), Memory: size(v, "memory"), CPURequest: cpu(v, "cpu_request"),
		MemoryRequest: size(v, "memory_request"), Storage: size(v, "ephemeral_storage"),
		ReadOnly: v.Bool("readonly"), NodeCache: v.Bool("node_cache"),
		StartTimeout: v.Duration("start_timeout"), LeaseDuration: v.Duration("lease_duration"),
		MaxLifetime: v.Duration("max_lifetime"), Binary: v.String("binary"), Arch: v.String("arch"),
		ExecEach: v.Bool("exec_each"), Via: Via(v.String("via")), Template: v.String("template"), WarmPool: v.String("warm_pool"),
	}
	if user := v.String("user"); user != "" {
		var err error
		if o.UID, o.GID, err = parseUser(user); err != nil {
			return nil, Settings.Invalid("user", user, err)
		}
	}
	return o, nil
}

// parseUser reads uid[:gid], not root.
func parseUser(v string) (uid, gid int64, err error) {
	u, g, ok := strings.Cut(v, ":")
	if uid, err = strconv.ParseInt(u, 10, 64); err == nil && ok {
		gid, err = strconv.ParseInt(g, 10, 64)
	} else if err == nil {
		gid = uid
	}
	if err != nil || uid <= 0 || gid < 0 {
		return 0, 0, errors.New("must be a non-root uid[:gid]")
	}
	return uid, gid, nil
}

// cpu is a Quantity setting as a Kubernetes quantity ("" unset, "none").
func cpu(v settings.Values, name string) string {
	switch q := v.Quantity(name); {
	case q < 0:
		return settings.None
	case q > 0:
		return resource.NewMilliQuantity(int64(math.Round(q*1000)), resource.DecimalSI).String()
	}
	return ""
}

// size is a Size setting as a Kubernetes quantity ("" unset, "none").
func size(v settings.Values, name string) string {
	switch n := v.Int(name); {
	case n < 0:
		return settings.None
	case n > 0:
		return resource.NewQuantity(n, resource.BinarySI).String()
	}
	return ""
}

// resources are the container's parsed requests and limits.
type resources struct {
	limits, requests corev1.ResourceList
}

func parseResources(o *Options) (resources, error) {
	r := resources{limits: corev1.ResourceList{}, requests: corev1.ResourceList{}}
	set := func(list corev1.ResourceList, name corev1.ResourceName, v, def, what string) error {
		if v == "" {
			v = def
		}
		if v == "none" {
			return nil
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return fmt.Errorf("%w: %s %q: %w", ErrConfig, what, v, err)
		}
		list[name] = q
		return nil
	}
	return r, errors.Join(
		set(r.limits, corev1.ResourceCPU, o.CPU, DefaultCPU, "cpu"),
		set(r.limits, corev1.ResourceMemory, o.Memory, DefaultMemory, "memory"),
		set(r.limits, corev1.ResourceEphemeralStorage, o.Storage, DefaultStorage, "ephemeral_storage"),
		set(r.requests, corev1.ResourceCPU, o.CPURequest, DefaultCPURequest, "cpu_request"),
		set(r.requests, corev1.ResourceMemory, o.MemoryRequest, DefaultMemoryRequest, "memory_request"),
	)
}

// Provider is the kubernetes provider. It is safe for concurrent use.
type Provider struct {
	opts Options
	res  resources
	cfg  *rest.Config
	api  *api
	ns   string
	host string // the API server, for messages

	mu     sync.Mutex
	closed bool
	binary string // resolved static binary
	image  string // resolved outpost image
	pool   string // the claims' SandboxWarmPool (via=agent-sandbox), once found
	owner  *owner // nil until the first Open
	// The periodic GC (startSweeper): cancel and done.
	sweepStop context.CancelFunc
	sweepDone chan struct{}
	leases    int // open sandboxes
	ownerWG   sync.WaitGroup
}

// QuietClientLogs sends client-go's own log (klog) nowhere, as New does
// unless Options.ClientLogs. klog's logger is a process global that
// client-go reads without a lock, so a program (or test) that uses
// client-go itself while another goroutine may call New calls this first.
func QuietClientLogs() {
	quietClientOnce.Do(func() { klog.SetLogger(logr.Discard()) })
}

// New returns a kubernetes provider; nil opts means defaults. It loads
// the cluster configuration (errors wrap ErrConfig) but does not contact
// the cluster: Preflight and Open do.
func New(opts *Options) (*Provider, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if !o.ClientLogs {
		QuietClientLogs()
	}
	if o.Pull == "" {
		o.Pull = PullMissing
	}
	switch o.Pull {
	case PullMissing, PullNever, PullAlways:
	default:
		return nil, fmt.Errorf("%w: unknown pull policy %q (missing, never, always)", ErrConfig, o.Pull)
	}
	if err := checkVia(&o); err != nil {
		return nil, err
	}
	if o.UID == 0 {
		o.UID = DefaultUID
	}
	if o.GID == 0 && o.UID == DefaultUID {
		o.GID = DefaultGID
	}
	if o.UID < 0 || o.GID < 0 {
		return nil, fmt.Errorf("%w: uid and gid must not be negative", ErrConfig)
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = DefaultLeaseDuration
	}
	if o.LeaseDuration < 3*time.Second {
		return nil, fmt.Errorf("%w: lease duration %v is under 3s", ErrConfig, o.LeaseDuration)
	}
	if o.MaxLifetime == 0 {
		o.MaxLifetime = DefaultMaxLifetime
	}
	if o.Arch == "" {
		o.Arch = runtime.GOARCH
	}
	res, err := parseResources(&o)
	if err != nil {
		return nil, err
	}
	cfg, ns, err := loadConfig(&o)
	if err != nil {
		return nil, err
	}
	a, err := newAPI(cfg, ns)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return &Provider{opts: o, res: res, cfg: cfg, api: a, ns: ns, host: cfg.Host}, nil
}

// loadConfig applies client-go's standard loading rules.
func loadConfig(o *Options) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.Kubeconfig != "" {
		rules.ExplicitPath = o.Kubeconfig
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: o.Context}
	if o.Namespace != "" {
		overrides.Context.Namespace = o.Namespace
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		where := "client-go's loading rules ($KUBECONFIG, ~/.kube/config, in-cluster)"
		if o.Kubeconfig != "" {
			where = o.Kubeconfig
		}
		return nil, "", fmt.Errorf("%w: loading the cluster configuration from %s: %w", ErrConfig, where, err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("%w: the namespace: %w", ErrConfig, err)
	}
	if ns == "" {
		ns = "default"
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "outpost/" + version()
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 50, 100
	}
	return cfg, ns, nil
}

// Name returns "kubernetes".
func (p *Provider) Name() string { return "kubernetes" }

// Capabilities: host files may be copied into the private home, processes
// are isolated from the host, stdin is live, leases keep state.
func (p *Provider) Capabilities() driver.Capabilities {
	return driver.Capabilities{HostFiles: true, Isolated: true, Stdin: true, Persistent: true, FixedEnv: driver.HomeVars(), Egress: true, Isolation: driver.IsolationPod}
}

// Options returns the provider's options, defaults applied.
func (p *Provider) Options() Options { return p.opts }

// Namespace is the namespace of the provider's pods and Leases.
func (p *Provider) Namespace() string { return p.ns }

// RESTConfig is a copy of the provider's cluster configuration (for tests
// and diagnostics: client-go's clientset is built from it where needed).
func (p *Provider) RESTConfig() *rest.Config { return rest.CopyConfig(p.cfg) }

// needed are the permissions the provider needs in its namespace (the
// Role of providers/kubernetes/rbac.yaml grants exactly these).
var needed = []authv1.ResourceAttributes{
	{Verb: "create", Resource: "pods"},
	{Verb: "delete", Resource: "pods"},
	{Verb: "create", Resource: "pods", Subresource: "exec"},
	{Verb: "create", Group: "networking.k8s.io", Resource: "networkpolicies"},
	{Verb: "delete", Group: "networking.k8s.io", Resource: "networkpolicies"},
	{Verb: "create", Group: "coordination.k8s.io", Resource: "leases"},
	{Verb: "update", Group: "coordination.k8s.io", Resource: "leases"},
}

// Preflight asks the cluster whether the user may do what the provider
// needs in its namespace (SelfSubjectAccessReview). Errors: ErrForbidden
// naming what is missing, ErrConfig for credentials the server refuses,
// ErrUnreachable.
func (p *Provider) Preflight(ctx context.Context) error {
	var missing []string
	for _, ra := range p.needed() {
		ra.Namespace = p.ns
		r, err := p.api.reviews.create(ctx, &authv1.SelfSubjectAccessReview{Spec: authv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &ra}})
		if err != nil {
			return p.apiErr(ctx, "checking access", err)
		}
		if !r.Status.Allowed {
			what := ra.Verb + " " + ra.Resource
			if ra.Subresource != "" {
				what += "/" + ra.Subresource
			}
			if ra.Group != "" {
				what += "." + ra.Group
			}
			missing = append(missing, what)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: in namespace %q the user may not %s; bind the Role of providers/kubernetes/rbac.yaml", ErrForbidden, p.ns, strings.Join(missing, ", "))
	}
	return nil
}

// Close stops the periodic GC, stops renewing the provider's owner Lease
// and deletes it once its last sandbox is closed (so the garbage
// collector deletes nothing still in use). Calling it again returns nil.
func (p *Provider) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	o, n := p.owner, p.leases
	p.mu.Unlock()
	p.stopSweeper()
	if o != nil && n == 0 {
		o.release()
	}
	return nil
}

// version is outpost's version for annotations.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok || bi.Main.Version == "" {
		return "devel"
	}
	return bi.Main.Version
}

// resolveImage returns the outpost image (resolving the binary once).
func (p *Provider) resolveImage(ctx context.Context) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.image != "" {
		return p.image, nil
	}
	if p.opts.OutpostImage != "" {
		p.image = p.opts.OutpostImage
		return p.image, nil
	}
	bin := p.opts.Binary
	if bin != "" {
		if err := selfbin.Check(bin, p.opts.Arch); err != nil {
			return "", fmt.Errorf("%w: binary %s: %w (%s)", ErrConfig, bin, err, selfbin.Hint)
		}
	} else {
		var err error
		if bin, err = selfbin.LocateOrBuild(ctx, p.opts.Arch); err != nil {
			return "", fmt.Errorf("kubernetes: %w", err)
		}
	}
	ref, err := OutpostImageRef(bin)
	if err != nil {
		return "", err
	}
	p.binary, p.image = bin, ref
	return ref, nil
}

// RoleYAML is the minimal Role the provider needs in its namespace
// (rbac.yaml in this package's directory).
//
//go:embed rbac.yaml
var RoleYAML []byte
