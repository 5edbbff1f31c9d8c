package kubernetes

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/outposthq/outpost/providers/kubernetes/kubetest"
)

// TestClusterNetwork checks what the test cluster's kube-proxy gives: a
// ClusterIP Service routes from the host and from a pod, and the API
// server's in-cluster address (10.0.0.1:443) answers a pod.
func TestClusterNetwork(t *testing.T) {
	c := kubetest.Parallel(t)
	ctx := context.Background()
	ns := c.Namespace
	kubectl := func(args ...string) (string, error) {
		out, err := exec.Command(c.Env["KUBECTL"], append([]string{"--kubeconfig", c.Env["KUBECONFIG"], "-n", ns}, args...)...).CombinedOutput()
		return string(out), err
	}
	pod := func(name string, labels map[string]string, cmd ...string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "c", Image: kubetest.Busybox, ImagePullPolicy: corev1.PullNever, Command: cmd,
			}}},
		}
	}
	web := pod("net-web", map[string]string{"app": "net-web"}, "sh", "-c", "mkdir -p /tmp/www && echo hello-from-web >/tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www")
	client := pod("net-client", nil, "sleep", "3600")
	for _, p := range []*corev1.Pod{web, client} {
		if _, err := c.Admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "net-web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "net-web"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	svc, err := c.Admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kubectl("delete", "pod", "net-web", "net-client", "--grace-period=0", "--force")
		kubectl("delete", "service", "net-web")
	})
	if out, err := kubectl("wait", "--for=condition=Ready", "pod/net-web", "pod/net-client", "--timeout=2m"); err != nil {
		t.Fatalf("pods: %v\n%s", err, out)
	}
	if out, err := kubectl("wait", "--for=jsonpath={.subsets[0].addresses[0].ip}", "endpoints/net-web", "--timeout=1m"); err != nil {
		t.Fatalf("endpoints: %v\n%s", err, out)
	}
	// kube-proxy programs the Service's rules after the endpoints exist,
	// on its own schedule: until then the address may lead nowhere, or to
	// a deleted Service's endpoint that had it before (an earlier test's
	// outpost serve answered 404 ""). Ask until the web pod answers.
	url := "http://" + svc.Spec.ClusterIP + ":80/"
	var last string
	for deadline := time.Now().Add(time.Minute); ; {
		last = ""
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
		if err != nil {
			last = err.Error()
		} else {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(body), "hello-from-web") {
				break
			}
			last = fmt.Sprintf("%d %q", resp.StatusCode, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Service from the host, for a minute: %s", last)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// busybox's nc, not its wget: the image's static wget crashes (SIGSEGV,
	// exit status 139) on any request.
	get := func(addr, path string) (string, error) {
		return kubectl("exec", "net-client", "--", "sh", "-c", `printf 'GET `+path+` HTTP/1.0\r\n\r\n' | nc -w 10 `+addr)
	}
	if out, err := get(svc.Spec.ClusterIP+" 80", "/"); err != nil || !strings.Contains(out, "hello-from-web") {
		t.Errorf("the Service from a pod: %v %q", err, out)
	}
	// The address answers as the API server's TLS listener does to plain HTTP.
	if out, err := get("10.0.0.1 443", "/version"); err != nil || !strings.Contains(out, "Client sent an HTTP request to an HTTPS server") {
		t.Errorf("the API server at 10.0.0.1:443 from a pod: %v %q", err, out)
	}
}
