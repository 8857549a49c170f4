package policy_test

import (
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefence/kubefence/test/testenv"
)

// controlPlane starts a kube-apiserver and etcd (testenv.Start with in) that
// the test stops when it ends, and returns its config, an admin client of it
// and the admin's user name.
func controlPlane(t *testing.T, in testenv.Input) (*rest.Config, client.WithWatch, string) {
	t.Helper()
	testenv.SkipIfShort(t)
	cluster, err := testenv.Start(t.Context(), in)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	return cluster.Config, cluster.Admin, cluster.AdminUser
}
