package inprocess

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/policy"
)

// What one decision of the fencing policy costs the API server: the
// compiled policy evaluated as its dispatcher evaluates it, the tenure
// table as a ConfigMap parameter (wrapped and converted whole on every
// evaluation), for writes of a guarded Widget in namespace "guarded" whose
// lease "writer" is held by costHolder with token 7.

const (
	costNamespace   = "guarded"
	costIncarnation = "inc"
)

var (
	costHolder = &user.DefaultInfo{Name: "system:serviceaccount:guarded:writer"}
	widgetGVK  = schema.GroupVersionKind{Group: "example.kubefence.io", Version: "v1", Kind: "Widget"}
	widgetGVR  = schema.GroupVersionResource{Group: "example.kubefence.io", Version: "v1", Resource: "widgets"}
)

func costPolicy() validating.Validator {
	return CompilePolicy(policy.Settings{ControllerUsers: []string{"kubefence"}, Incarnation: costIncarnation}.FencingPolicy())
}

// costTable is the tenure table with lease writer's entry and leases-1
// other leases' entries.
func costTable(leases int) *corev1.ConfigMap {
	table := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: costNamespace, Name: coordv1alpha1.TenureTableName},
		Data: map[string]string{policy.IncarnationKey: costIncarnation}}
	policy.SetEntryOf(table, "writer", "7 100 - "+costHolder.Name)
	for i := 1; i < leases; i++ {
		policy.SetEntryOf(table, fmt.Sprintf("lease-%05d", i), fmt.Sprintf("%d %d - system:serviceaccount:%s:writer-%05d", 1000+i, 1000+i, costNamespace, i))
	}
	return table
}

func guardedWidget(token, writer string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(widgetGVK)
	u.SetNamespace(costNamespace)
	u.SetName("guarded")
	u.SetLabels(map[string]string{coordv1alpha1.GuardLeaseLabel: "writer"})
	u.SetAnnotations(map[string]string{coordv1alpha1.FencingTokenAnnotation: token})
	_ = unstructured.SetNestedField(u.Object, writer, "spec", "writer")
	return u
}

// holderUpdate is the holder's update with token 7 of an object that
// accepted oldToken.
func holderUpdate(t testing.TB, oldToken string) *admission.VersionedAttributes {
	attr := admission.NewAttributesRecord(guardedWidget("7", "new"), guardedWidget(oldToken, "old"), widgetGVK, costNamespace, "guarded", widgetGVR, "", admission.Update, nil, false, costHolder)
	va, err := admission.NewVersionedAttributes(attr, widgetGVK, nil)
	if err != nil {
		t.Fatal(err)
	}
	return va
}

// decide evaluates v for va against table and returns the refusal's
// message ("" when admitted).
func decide(v validating.Validator, va *admission.VersionedAttributes, table *corev1.ConfigMap) string {
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: costNamespace, Labels: map[string]string{"kubernetes.io/metadata.name": costNamespace}}}
	r := v.Validate(context.Background(), widgetGVR, va, wrapParam(table), namespace, celconfig.RuntimeCELCostBudget, noOpinion{})
	var refusals []string
	for _, d := range r.Decisions {
		if d.Action != validating.ActionAdmit {
			refusals = append(refusals, d.Message)
		}
	}
	return strings.Join(refusals, "; ")
}

// A decision allocates the same with 1 and with 1,000 leases in the table:
// the API server converts the parameter whole on every evaluation, so
// before the table held its entries in one string (one data key per lease)
// every guarded write paid for every lease's entry (docs/benchmarks.md,
// "Guarded writes in policy mode": 1.50 to 1.66 with 1,000 leases against
// 1.11 to 1.13 with 1). And the common write (the holder's update with the current
// token) costs well under half of one that takes the full verdict (the
// token the object accepted moves up to the current one): before, the
// API server evaluated the verdict for every write, twice (validation and
// messageExpression).
func TestFencingPolicyCostDoesNotGrowWithTheTable(t *testing.T) {
	v := costPolicy()
	allocs := func(leases int, oldToken string) float64 {
		table, va := costTable(leases), holderUpdate(t, oldToken)
		if msg := decide(v, va, table); msg != "" {
			t.Fatalf("the holder's update (old token %s, %d leases) was refused: %s", oldToken, leases, msg)
		}
		return testing.AllocsPerRun(50, func() { decide(v, va, table) })
	}
	one, thousand := allocs(1, "7"), allocs(1000, "7")
	t.Logf("allocations per decision: %.0f with 1 lease, %.0f with 1,000", one, thousand)
	if thousand > one+16 {
		t.Errorf("a decision allocates %.0f times with 1,000 leases in the table against %.0f with 1: the cost grows with the table", thousand, one)
	}
	verdict := allocs(1, "6")
	t.Logf("allocations per decision: %.0f for the common write, %.0f for one the verdict decides", one, verdict)
	if one > verdict/2 {
		t.Errorf("the holder's common update allocates %.0f times, a write the verdict decides %.0f: the common write does not take the short path", one, verdict)
	}
}

// A table with keys besides the incarnation and the entries (one written
// by an earlier version, one key per lease, or written to by one during a
// rolling upgrade) is not trusted: an earlier version's grant in its own
// key is not in the entries the policy reads.
func TestFencingPolicyDistrustsATableOfTheEarlierFormat(t *testing.T) {
	v := costPolicy()
	va := holderUpdate(t, "7")
	table := costTable(1)
	if msg := decide(v, va, table); msg != "" {
		t.Fatalf("the holder's update was refused: %s", msg)
	}
	table.Data["writer"] = "8 200 - system:serviceaccount:guarded:other"
	if msg := decide(v, va, table); !strings.Contains(msg, "was not written for the installed fencing policy") {
		t.Errorf("the holder's update against a table with an earlier version's key for its lease: %q, want refused as not written for the installed policy", msg)
	}
}

// BenchmarkFencingPolicy is the CPU one decision costs (process CPU time:
// the machine is shared) for the holder's common update, with 1 and 1,000
// leases in the table.
func BenchmarkFencingPolicy(b *testing.B) {
	v := costPolicy()
	for _, leases := range []int{1, 1000} {
		b.Run(fmt.Sprintf("leases=%d", leases), func(b *testing.B) {
			table, va := costTable(leases), holderUpdate(b, "7")
			start := cpuTime()
			for b.Loop() {
				if msg := decide(v, va, table); msg != "" {
					b.Fatalf("refused: %s", msg)
				}
			}
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is this process's CPU time (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// wrappedParam is the API server's wrapper of a typed parameter without
// TypeMeta (k8s.io/apiserver validating dispatcher, unexported): converted
// whole to unstructured on every evaluation.
type wrappedParam struct {
	metav1.TypeMeta
	nested runtime.Object
}

func wrapParam(o runtime.Object) runtime.Object {
	return &wrappedParam{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, nested: o}
}

func (w *wrappedParam) ToUnstructured() any {
	res, err := runtime.DefaultUnstructuredConverter.ToUnstructured(w.nested)
	if err != nil {
		return nil
	}
	res["apiVersion"], res["kind"] = w.APIVersion, w.Kind
	return res
}

// MarshalJSON makes wrappedParam an UnstructuredConverter, as the API
// server's is; it is never called.
func (w *wrappedParam) MarshalJSON() ([]byte, error) {
	return nil, errors.New("MarshalJSON unimplemented for wrappedParam")
}

func (w *wrappedParam) DeepCopyObject() runtime.Object {
	return &wrappedParam{TypeMeta: w.TypeMeta, nested: w.nested.DeepCopyObject()}
}
