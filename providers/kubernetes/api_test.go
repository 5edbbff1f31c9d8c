package kubernetes

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	authv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
)

// TestPreflight: Preflight posts one SelfSubjectAccessReview (a
// cluster-scoped resource) per permission, each about the provider's
// namespace, and names every refused one in an ErrForbidden.
func TestPreflight(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refuse  string // the resource the server refuses
		wantErr string
	}{
		{"all granted", "", ""},
		{"no NetworkPolicy", "networkpolicies", `in namespace "agents" the user may not create networkpolicies.networking.k8s.io, delete networkpolicies.networking.k8s.io; bind the Role`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var paths, namespaces []string
			enc := apiCodecs().codecs.LegacyCodec(authv1.SchemeGroupVersion)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				obj, err := runtime.Decode(apiCodecs().codecs.UniversalDeserializer(), body)
				review, ok := obj.(*authv1.SelfSubjectAccessReview)
				if err != nil || !ok || review.Spec.ResourceAttributes == nil {
					http.Error(w, "not a review", http.StatusBadRequest)
					return
				}
				mu.Lock()
				paths = append(paths, r.Method+" "+r.URL.Path)
				namespaces = append(namespaces, review.Spec.ResourceAttributes.Namespace)
				mu.Unlock()
				review.Status.Allowed = review.Spec.ResourceAttributes.Resource != tc.refuse
				w.Header().Set("Content-Type", runtime.ContentTypeJSON)
				w.WriteHeader(http.StatusCreated)
				_ = enc.Encode(review, w)
			}))
			defer srv.Close()
			cfg := &rest.Config{Host: srv.URL}
			a, err := newAPI(cfg, "agents")
			if err != nil {
				t.Fatal(err)
			}
			p := &Provider{cfg: cfg, api: a, ns: "agents", host: srv.URL}
			err = p.Preflight(t.Context())
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Preflight: %v", err)
			case tc.wantErr != "" && (!errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Preflight = %v, want ErrForbidden saying %q", err, tc.wantErr)
			}
			want := make([]string, len(needed))
			for i := range want {
				want[i] = "POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
			}
			if d := cmp.Diff(want, paths); d != "" {
				t.Errorf("requests (-want +got):\n%s", d)
			}
			if d := cmp.Diff(strings.Fields(strings.Repeat("agents ", len(needed))), namespaces); d != "" {
				t.Errorf("the reviews' namespaces (-want +got):\n%s", d)
			}
		})
	}
}
