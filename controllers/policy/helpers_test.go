package policy_test

import (
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefence/kubefence/test/testenv"
)

// controlPlane starts a kube-apiserver and etcd (testenv.Start with in) that
// the test stops when it ends, and returns its config, an admin client of it
// (the suites' scheme, testenv.NewScheme) and the admin's user name.
func controlPlane(t *testing.T, in testenv.Input) (*rest.Config, client.WithWatch, string) {
	t.Helper()
	testenv.SkipIfShort(t)
	env, cfg, err := testenv.Start(in)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: testenv.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := testenv.AdminUser(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, c, admin
}
