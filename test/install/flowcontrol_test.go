package install

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kubefence/kubefence/test/testenv"
)

// TestFlowControlClassifiesFencedLeaseTraffic applies the rendered
// FlowSchemas and PriorityLevelConfiguration server-side (for real) and checks,
// from the API server's own X-Kubernetes-PF-* response headers, that a
// service account's FencedLease requests and the operator's requests land in
// the kubefence priority level, while other traffic does not.
func TestFlowControlClassifiesFencedLeaseTraffic(t *testing.T) {
	testenv.SkipIfShort(t)
	docs := documents(t, render(t))
	var manifest []byte
	n := 0
	for _, d := range docs {
		if d["apiVersion"] == "flowcontrol.apiserver.k8s.io/v1" {
			b, err := sigsyaml.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			manifest = append(append(manifest, "---\n"...), b...)
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d flowcontrol objects in config/default, want 3 (two FlowSchemas, one priority level)", n)
	}

	a := startAPIServer(t, filepath.Join(root, "config", "crd", "bases"))
	env, c := a.env, a.c
	a.apply(t, manifest, nil,
		"prioritylevelconfiguration.flowcontrol.apiserver.k8s.io/kubefence-leases serverside-applied",
		"flowschema.flowcontrol.apiserver.k8s.io/kubefence-operator serverside-applied",
		"flowschema.flowcontrol.apiserver.k8s.io/kubefence-renewals serverside-applied")

	ctx := context.Background()
	var pl flowcontrolv1.PriorityLevelConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: "kubefence-leases"}, &pl); err != nil {
		t.Fatal(err)
	}
	uid := map[string]string{}
	for _, name := range []string{"kubefence-operator", "kubefence-renewals"} {
		var fs flowcontrolv1.FlowSchema
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &fs); err != nil {
			t.Fatal(err)
		}
		uid[name] = string(fs.UID)
	}

	// classify sends one GET as user and returns the FlowSchema and priority
	// level UIDs the API server stamped on the answer (authorization runs
	// after classification, so a 403 is classified too).
	classify := func(user envtest.User, path string) (flowSchema, level string) {
		t.Helper()
		u, err := env.AddUser(user, nil)
		if err != nil {
			t.Fatal(err)
		}
		hc, err := rest.HTTPClientFor(u.Config())
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Get(strings.TrimSuffix(u.Config().Host, "/") + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID"), resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID")
	}
	worker := envtest.User{Name: "system:serviceaccount:jobs:worker", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:jobs", "system:authenticated"}}
	operator := envtest.User{Name: "system:serviceaccount:kubefence-system:kubefence-controller-manager",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kubefence-system", "system:authenticated"}}
	leases := "/apis/coordination.kubefence.io/v1alpha1/namespaces/jobs/fencedleases"
	// The API server's configuration controller picks new objects up
	// asynchronously: wait for the first classification.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if fs, _ := classify(worker, leases); fs == uid["kubefence-renewals"] || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, tc := range []struct {
		what       string
		user       envtest.User
		path       string
		flowSchema string
		inLevel    bool
	}{
		{"a service account's FencedLease request", worker, leases, uid["kubefence-renewals"], true},
		{"the operator's FencedLease request", operator, leases, uid["kubefence-operator"], true},
		{"the operator's ConfigMap request (epoch store)", operator, "/api/v1/namespaces/jobs/configmaps/kubefence-epochs-00", uid["kubefence-operator"], true},
		{"a service account's ConfigMap request", worker, "/api/v1/namespaces/jobs/configmaps", "", false},
	} {
		fs, level := classify(tc.user, tc.path)
		if level == "" {
			t.Errorf("%s: no X-Kubernetes-PF-PriorityLevel-UID header: is API Priority and Fairness on?", tc.what)
			continue
		}
		if tc.inLevel != (level == string(pl.UID)) {
			t.Errorf("%s: priority level %s, in kubefence-leases (%s): %v, want %v", tc.what, level, pl.UID, level == string(pl.UID), tc.inLevel)
		}
		if tc.flowSchema != "" && fs != tc.flowSchema {
			t.Errorf("%s: FlowSchema %s, want %s", tc.what, fs, tc.flowSchema)
		}
	}
}
