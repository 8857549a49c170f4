package cleanup_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/controllers/policy"
	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/test/testenv"
)

// TestUninstallRemovesRuntimeObjects installs policy mode with `kubectl
// apply` of config/policy (then `make undeploy`) and with the chart (then
// `helm uninstall`), each on a control plane of its own with a real
// kube-controller-manager (garbage collector and namespace controller). The
// operator runs in process with the deployed --owner-cluster-role and
// creates its run-time objects: the policies and bindings and a tenure
// table. After the uninstall, with the operator still running (as its pods
// do while they terminate), the garbage collector deletes every one of them
// (their owner, the ClusterRole kubefence-policy-role, is gone) and the
// operator writes none again; what docs/operations.md ("Uninstall") says
// stays, stays: the CRD, the FencedLease with its epoch finalizer, the
// operator namespace and the epoch store kubefence-epochs.
func TestUninstallRemovesRuntimeObjects(t *testing.T) {
	testenv.SkipIfShort(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	helm := filepath.Join(root, "bin", "helm")
	run := func(t *testing.T, name string, args ...string) {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
		}
		t.Logf("%s %s:\n%s", filepath.Base(name), strings.Join(args, " "), out)
	}
	for _, c := range []struct {
		name               string
		install, uninstall func(t *testing.T, kubeconfig string)
	}{
		{"make undeploy", func(t *testing.T, kubeconfig string) {
			manifest := filepath.Join(t.TempDir(), "policy.yaml")
			out, err := exec.Command(filepath.Join(root, "bin", "kustomize"), "build", filepath.Join(root, "config", "policy")).Output()
			if err != nil {
				t.Fatalf("kustomize build config/policy: %v", err)
			}
			if err := os.WriteFile(manifest, out, 0o600); err != nil {
				t.Fatal(err)
			}
			run(t, kubectl, "--kubeconfig="+kubeconfig, "apply", "--server-side", "-f", manifest)
		}, func(t *testing.T, kubeconfig string) {
			run(t, "make", "--no-print-directory", "-C", root, "undeploy", "DEPLOY_CONFIG=config/policy",
				"KUBECTL="+kubectl+" --kubeconfig="+kubeconfig, "UNDEPLOY_WAIT=false")
		}},
		{"helm uninstall", func(t *testing.T, kubeconfig string) {
			// The chart without its kubeVersion constraint: the API server
			// built from source reports v0.0.0-master, which none admits.
			chart := testenv.ChartWithoutKubeVersion(t, root, t.TempDir())
			run(t, helm, "install", "kubefence", chart, "--kubeconfig", kubeconfig,
				"--namespace", operatorNamespace, "--create-namespace", "--set", "enforcement=policy", "--set", "image.repository=registry.example.com/kubefence")
		}, func(t *testing.T, kubeconfig string) {
			run(t, helm, "uninstall", "kubefence", "--kubeconfig", kubeconfig, "--namespace", operatorNamespace)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx, cancel := context.WithCancel(suiteCtx)
			scheme := devenv.NewScheme()
			g.Expect(apiextensionsv1.AddToScheme(scheme)).To(Succeed())
			pc, err := testenv.Start(ctx, testenv.Input{Root: root, Scheme: scheme, Policy: true})
			g.Expect(err).NotTo(HaveOccurred())
			t.Cleanup(func() {
				cancel()
				if err := pc.Stop(); err != nil {
					t.Errorf("stopping the control plane: %v", err)
				}
			})
			kubeconfig, err := pc.Kubeconfig(t.TempDir(), "installer", "system:masters")
			g.Expect(err).NotTo(HaveOccurred())
			kcmConfig, err := kcmIdentity(ctx, pc, "uninstall-kcm-admin")
			g.Expect(err).NotTo(HaveOccurred())
			k := startKCMOn(t, pc, kcmConfig, true)

			c.install(t, kubeconfig)
			g.Eventually(func() error {
				return pc.Admin.List(ctx, &coordv1alpha1.FencedLeaseList{})
			}).WithTimeout(30*time.Second).Should(Succeed(), "the FencedLease CRD is not served")

			// The operator as deployed in policy mode (--owner-cluster-role).
			o := pc.Operator()
			o.Namespace = operatorNamespace // helm's --create-namespace made it
			o.Enforcement = operator.EnforcementPolicy
			o.OwnerClusterRole = policy.DefaultOwnerClusterRole
			opCtx, stopOperator := context.WithCancel(ctx)
			defer stopOperator()
			_, err = pc.ServeOperator(opCtx, o, nil)
			g.Expect(err).NotTo(HaveOccurred())
			settings := o.PolicySettings()
			settings.Incarnation = "x"
			runtimeObjects := settings.Objects()
			g.Eventually(func(g Gomega) {
				for _, want := range runtimeObjects {
					g.Expect(pc.Admin.Get(ctx, client.ObjectKeyFromObject(want), want.DeepCopyObject().(client.Object))).To(Succeed())
				}
			}).WithTimeout(30*time.Second).Should(Succeed(), "the policies are not applied")

			// A lease granted once: its tenure table, and its epoch finalizer.
			g.Expect(pc.Admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "uninstall-alice"},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "alice"}}})).To(Succeed())
			alice, _, err := pc.User("alice")
			g.Expect(err).NotTo(HaveOccurred())
			ns, err := pc.Namespace(ctx, "uninstall")
			g.Expect(err).NotTo(HaveOccurred())
			_, stopEl := leadJob(ctx, g, pc, alice, ns)
			stopEl()
			table := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: coordv1alpha1.TenureTableName}}
			g.Expect(pc.Admin.Get(ctx, client.ObjectKeyFromObject(table), table)).To(Succeed())

			c.uninstall(t, kubeconfig)
			start := time.Now()
			leftovers := func() []string {
				var left []string
				for _, o := range append(runtimeObjects, table) {
					live := o.DeepCopyObject().(client.Object)
					err := pc.Admin.Get(ctx, client.ObjectKeyFromObject(o), live)
					if !apierrors.IsNotFound(err) {
						left = append(left, o.GetObjectKind().GroupVersionKind().Kind+" "+client.ObjectKeyFromObject(o).String())
					}
				}
				return left
			}
			g.Eventually(func() []string { k.running(t); return leftovers() }).WithTimeout(90*time.Second).WithPolling(200*time.Millisecond).
				Should(BeEmpty(), "left after the uninstall")
			t.Logf("%s: every run-time object collected %v after the uninstall", c.name, time.Since(start).Round(time.Millisecond))
			// The operator, still running, writes none of them again.
			g.Consistently(leftovers).WithTimeout(3*time.Second).WithPolling(200*time.Millisecond).Should(BeEmpty(), "written again after the uninstall")
			stopOperator()

			// Kept: token history (the CRD, the FencedLease with its finalizer;
			// the epoch shards live in the lease namespaces).
			g.Expect(pc.Admin.Get(ctx, client.ObjectKey{Name: "fencedleases.coordination.kubefence.io"}, &apiextensionsv1.CustomResourceDefinition{})).To(Succeed(), "the CRD")
			var lease coordv1alpha1.FencedLease
			g.Expect(pc.Admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "job"}, &lease)).To(Succeed(), "the FencedLease")
			g.Expect(lease.Finalizers).To(ContainElement(coordv1alpha1.EpochFinalizer))
			var vaps admissionv1.ValidatingAdmissionPolicyList
			g.Expect(pc.Admin.List(ctx, &vaps)).To(Succeed())
			g.Expect(vaps.Items).To(BeEmpty())
		})
	}
}
