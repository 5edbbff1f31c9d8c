package kubernetes

import (
	"context"
	"sync"

	authv1 "k8s.io/api/authorization/v1"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	extv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
)

// The provider talks to the API server through client-go's REST client
// over a scheme of only the API groups it uses (agent-sandbox's extensions
// group for via=agent-sandbox: its types from sigs.k8s.io/agent-sandbox), not client-go's
// clientset: the clientset's scheme registers every built-in group at
// init, in every outpost process, and its typed clients more than double
// the CLI's packages (docs/sandboxes/kubernetes.md gives the figures).

// codecs are the scheme of the groups the provider uses, its codecs and
// its ParameterCodec (options as query parameters), as client-go's
// kubernetes/scheme builds them for all groups.
type codecs struct {
	scheme *runtime.Scheme
	codecs serializer.CodecFactory
	params runtime.ParameterCodec
}

// apiCodecs builds the codecs on first use, not at init.
var apiCodecs = sync.OnceValue(func() *codecs {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	groups := runtime.NewSchemeBuilder(corev1.AddToScheme, coordv1.AddToScheme, networkingv1.AddToScheme, authv1.AddToScheme, extv1.AddToScheme)
	utilruntime.Must(groups.AddToScheme(s))
	return &codecs{scheme: s, codecs: serializer.NewCodecFactory(s), params: runtime.NewParameterCodec(s)}
})

// api is the provider's client: one REST client per group-version, and
// the resources it uses in its namespace.
type api struct {
	core     *rest.RESTClient // also the pods' exec subresource
	pods     apiResource[corev1.Pod, *corev1.Pod]
	events   apiResource[corev1.Event, *corev1.Event]
	leases   apiResource[coordv1.Lease, *coordv1.Lease]
	policies apiResource[networkingv1.NetworkPolicy, *networkingv1.NetworkPolicy]
	reviews  apiResource[authv1.SelfSubjectAccessReview, *authv1.SelfSubjectAccessReview] // cluster-scoped
	// agent-sandbox's custom resources (JSON only: no protobuf for CRDs)
	claims    apiResource[extv1.SandboxClaim, *extv1.SandboxClaim]
	templates apiResource[extv1.SandboxTemplate, *extv1.SandboxTemplate]
	pools     apiResource[extv1.SandboxWarmPool, *extv1.SandboxWarmPool]
}

// newAPI builds the REST clients of cfg, sharing one HTTP client and one
// rate limiter, as client-go's clientset does.
func newAPI(cfg *rest.Config, ns string) (*api, error) {
	c := *cfg
	if c.RateLimiter == nil && c.QPS > 0 && c.Burst > 0 {
		c.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(c.QPS, c.Burst)
	}
	hc, err := rest.HTTPClientFor(&c)
	if err != nil {
		return nil, err
	}
	var clients [5]*rest.RESTClient
	for i, gv := range []schema.GroupVersion{corev1.SchemeGroupVersion, coordv1.SchemeGroupVersion, networkingv1.SchemeGroupVersion, authv1.SchemeGroupVersion, extv1.GroupVersion} {
		gc := c
		gc.GroupVersion, gc.APIPath = &gv, "/apis"
		if gv.Group == "" {
			gc.APIPath = "/api"
		}
		if gv == extv1.GroupVersion {
			// A content type set: the requests' UseProtobufAsDefault keeps it.
			gc.ContentType, gc.AcceptContentTypes = runtime.ContentTypeJSON, runtime.ContentTypeJSON
		}
		gc.NegotiatedSerializer = apiCodecs().codecs.WithoutConversion()
		if clients[i], err = rest.RESTClientForConfigAndClient(&gc, hc); err != nil {
			return nil, err
		}
	}
	core, coord, net, authz, ext := clients[0], clients[1], clients[2], clients[3], clients[4]
	return &api{
		core:      core,
		pods:      apiResource[corev1.Pod, *corev1.Pod]{core, ns, "pods"},
		events:    apiResource[corev1.Event, *corev1.Event]{core, ns, "events"},
		leases:    apiResource[coordv1.Lease, *coordv1.Lease]{coord, ns, "leases"},
		policies:  apiResource[networkingv1.NetworkPolicy, *networkingv1.NetworkPolicy]{net, ns, "networkpolicies"},
		reviews:   apiResource[authv1.SelfSubjectAccessReview, *authv1.SelfSubjectAccessReview]{authz, "", "selfsubjectaccessreviews"},
		claims:    apiResource[extv1.SandboxClaim, *extv1.SandboxClaim]{ext, ns, "sandboxclaims"},
		templates: apiResource[extv1.SandboxTemplate, *extv1.SandboxTemplate]{ext, ns, "sandboxtemplates"},
		pools:     apiResource[extv1.SandboxWarmPool, *extv1.SandboxWarmPool]{ext, ns, "sandboxwarmpools"},
	}, nil
}

// object is a pointer to an API object type T.
type object[T any] interface {
	*T
	runtime.Object
	GetName() string
}

// apiResource is one resource of a group-version in a namespace ("" for a
// cluster-scoped one): the calls of client-go's typed clients the
// provider makes, with the same requests (protobuf preferred, options
// as query parameters). Errors are the REST client's: *StatusError for
// the server's refusals (apierrors.IsNotFound...).
type apiResource[T any, P object[T]] struct {
	c        *rest.RESTClient
	ns, name string
}

func (r apiResource[T, P]) req(verb string) *rest.Request {
	return r.c.Verb(verb).UseProtobufAsDefault().NamespaceIfScoped(r.ns, r.ns != "").Resource(r.name)
}

// into runs req and decodes its answer into a new T.
func (r apiResource[T, P]) into(ctx context.Context, req *rest.Request) (P, error) {
	out := P(new(T))
	if err := req.Do(ctx).Into(out); err != nil {
		return nil, err
	}
	return out, nil
}

func (r apiResource[T, P]) create(ctx context.Context, obj P) (P, error) {
	return r.into(ctx, r.req("POST").Body(obj))
}

func (r apiResource[T, P]) get(ctx context.Context, name string) (P, error) {
	return r.into(ctx, r.req("GET").Name(name))
}

func (r apiResource[T, P]) update(ctx context.Context, obj P) (P, error) {
	return r.into(ctx, r.req("PUT").Name(obj.GetName()).Body(obj))
}

func (r apiResource[T, P]) delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return r.req("DELETE").Name(name).Body(&opts).Do(ctx).Error()
}

// list decodes the objects opts selects into list (a *corev1.PodList...).
func (r apiResource[T, P]) list(ctx context.Context, opts metav1.ListOptions, list runtime.Object) error {
	return r.req("GET").VersionedParams(&opts, apiCodecs().params).Do(ctx).Into(list)
}

func (r apiResource[T, P]) watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return r.req("GET").VersionedParams(&opts, apiCodecs().params).Watch(ctx)
}
