// Package inprocess admits one write the way a kube-apiserver with the
// operator installed would, in either enforcement mode, without an API
// server: the unit tier's stand-in for test/enforcement.
//
//   - Webhooks: the entries of config/webhook (the FencedLease validator and
//     the fencing webhooks; in policy mode what the patches of
//     config/components/policy leave of them, testenv.PolicyModeFencingWebhooks:
//     the /scale and eviction entries) are selected by the
//     API server's own matchers (namespace and object selectors, rules,
//     matchConditions compiled by its CEL compiler), sent the AdmissionReview
//     the API server's own code builds, to the operator's handlers over
//     HTTP in process, and their answers turned into errors by the API
//     server's own code.
//   - Policies (policy mode): the ValidatingAdmissionPolicies and bindings
//     the operator generates (controllers/policy, from the operator's
//     PolicySettings) are compiled with the API server's CEL environment, as
//     its ValidatingAdmissionPolicy plugin compiles them, and judged by its
//     policy dispatcher: bindings matched by their selectors and rules, the
//     tenure table as params, the namespace as namespaceObject.
//
// The state a write is judged against (World) is written as the operator
// writes it: the tenure tables by policy.Tenures (Sync and Deleted) from the
// FencedLeases. The map behind it (store) is storage for this process only;
// claims about a cluster are test/enforcement's, which replays the same
// tables (test/ruletable) on a real API server.
//
// It imports the production packages and the API server's admission code;
// no production package may import it.
package inprocess

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/admission"
	admissioncel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook"
	webhookerrors "k8s.io/apiserver/pkg/admission/plugin/webhook/errors"
	webhookgeneric "k8s.io/apiserver/pkg/admission/plugin/webhook/generic"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/namespace"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/object"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules"
	webhookrequest "k8s.io/apiserver/pkg/admission/plugin/webhook/request"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/cel/environment"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/controllers/policy"
	leasewebhook "github.com/kubefence/kubefence/controllers/webhooks/fencedlease"
	"github.com/kubefence/kubefence/controllers/webhooks/fencing"
	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/test/testenv"
)

// Incarnation is the fencing policy's incarnation in process: the tenure
// tables are written for it.
const Incarnation = "inprocess"

// World is what a write is judged against.
type World struct {
	// Namespaces exist with their labels; the write's namespace must be
	// among them.
	Namespaces []*corev1.Namespace
	// Leases are the FencedLeases, with their status. In policy mode each
	// lease's namespace has a tenure table, its entries written from the
	// leases as the controller writes them (policy.Tenures.Sync), after
	// Deleted.
	Leases []*coordv1alpha1.FencedLease
	// Deleted are leases deleted before Leases were created: their
	// highest tokens, recorded by policy.Tenures.Deleted.
	Deleted []Deleted
	// Table, if set, changes a namespace's tenure table after it was
	// written (policy mode): a table left by another installation, or none.
	Table func(ns string, cm *corev1.ConfigMap) *corev1.ConfigMap
	// Objects are the stored objects the fencing webhook reads as the
	// parent of a /scale write or an eviction.
	Objects []*unstructured.Unstructured
	// Now is every clock's time (the webhooks' and the validator's).
	Now time.Time
}

// Deleted is a lease deleted with its highest token.
type Deleted struct {
	Namespace, Name string
	High            int64
}

// Request is one write, as the API server hands it to admission.
type Request struct {
	Operation   admission.Operation
	Kind        schema.GroupVersionKind
	Resource    schema.GroupVersionResource
	SubResource string
	Namespace   string
	Name        string
	// Object is nil on DELETE, OldObject on CREATE.
	Object, OldObject *unstructured.Unstructured
	User              user.Info
}

// Admission is one enforcement mode's admission.
type Admission struct {
	mode    string
	options operator.Options
	// webhooks are the entries of config/webhook installed in this mode.
	webhooks []webhook.WebhookAccessor
	// hooks are the compiled policies with their bindings (policy mode).
	hooks    []validating.PolicyHook
	settings policy.Settings
	compiler admissioncel.ConditionCompiler
}

// New is the admission of the operator configured by o, in its mode
// (o.Enforcement). root is the repository's root (config/webhook).
func New(root string, o operator.Options) (*Admission, error) {
	a := &Admission{mode: o.Enforcement, options: o,
		compiler: admissioncel.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))}
	var configs []*admissionregistrationv1.ValidatingWebhookConfiguration
	if o.Enforcement == operator.EnforcementPolicy {
		// config/components/policy: the fencing configuration's /scale and
		// eviction entries; the policies judge the rest.
		cfg, err := testenv.PolicyModeFencingWebhooks(root)
		if err != nil {
			return nil, err
		}
		configs = append(configs, cfg)
	} else {
		for _, path := range devenv.WebhookPaths(root) {
			cfg, err := readWebhooks(path)
			if err != nil {
				return nil, err
			}
			configs = append(configs, cfg)
		}
	}
	for _, cfg := range configs {
		for i := range cfg.Webhooks {
			w := &cfg.Webhooks[i]
			defaultWebhook(w)
			a.webhooks = append(a.webhooks, webhook.NewValidatingWebhookAccessor(w.Name, cfg.Name, w))
		}
	}
	if o.Enforcement == operator.EnforcementPolicy {
		a.settings = o.PolicySettings()
		a.settings.Incarnation = Incarnation
		if err := a.settings.Validate(); err != nil {
			return nil, err
		}
		// What the operator installs (policy.Installer), each policy with
		// its bindings.
		byName := map[string]int{}
		objs := a.settings.Objects()
		for _, obj := range objs {
			if p, ok := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy); ok {
				byName[p.Name] = len(a.hooks)
				a.hooks = append(a.hooks, validating.PolicyHook{Policy: p})
			}
		}
		for _, obj := range objs {
			if b, ok := obj.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding); ok {
				i, ok := byName[b.Spec.PolicyName]
				if !ok {
					return nil, fmt.Errorf("binding %s names policy %s, which the operator does not install", b.Name, b.Spec.PolicyName)
				}
				a.hooks[i].Bindings = append(a.hooks[i].Bindings, b)
			}
		}
		for i := range a.hooks {
			defaultPolicy(a.hooks[i].Policy)
			for _, b := range a.hooks[i].Bindings {
				defaultMatch(b.Spec.MatchResources)
			}
			a.hooks[i].Evaluator = CompilePolicy(a.hooks[i].Policy)
			if err := a.hooks[i].Evaluator.CompileError(); err != nil {
				return nil, fmt.Errorf("compiling ValidatingAdmissionPolicy %s: %w", a.hooks[i].Policy.Name, err)
			}
		}
	}
	return a, nil
}

// The API server's defaults of the admissionregistration.k8s.io/v1 objects
// kubefence installs (k8s.io/kubernetes/pkg/apis/admissionregistration/v1,
// defaults.go), which its admission code relies on: an unset selector
// matches everything once stored.

func defaultWebhook(w *admissionregistrationv1.ValidatingWebhook) {
	if w.FailurePolicy == nil {
		w.FailurePolicy = ptr.To(admissionregistrationv1.Fail)
	}
	if w.MatchPolicy == nil {
		w.MatchPolicy = ptr.To(admissionregistrationv1.Equivalent)
	}
	if w.NamespaceSelector == nil {
		w.NamespaceSelector = &metav1.LabelSelector{}
	}
	if w.ObjectSelector == nil {
		w.ObjectSelector = &metav1.LabelSelector{}
	}
	if w.TimeoutSeconds == nil {
		w.TimeoutSeconds = ptr.To[int32](10)
	}
	for i := range w.Rules {
		defaultRule(&w.Rules[i].Rule)
	}
}

func defaultPolicy(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
	if p.Spec.FailurePolicy == nil {
		p.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Fail)
	}
	defaultMatch(p.Spec.MatchConstraints)
}

func defaultMatch(m *admissionregistrationv1.MatchResources) {
	if m == nil {
		return
	}
	if m.MatchPolicy == nil {
		m.MatchPolicy = ptr.To(admissionregistrationv1.Equivalent)
	}
	if m.NamespaceSelector == nil {
		m.NamespaceSelector = &metav1.LabelSelector{}
	}
	if m.ObjectSelector == nil {
		m.ObjectSelector = &metav1.LabelSelector{}
	}
	for _, rules := range [][]admissionregistrationv1.NamedRuleWithOperations{m.ResourceRules, m.ExcludeResourceRules} {
		for i := range rules {
			defaultRule(&rules[i].Rule)
		}
	}
}

func defaultRule(r *admissionregistrationv1.Rule) {
	if r.Scope == nil {
		r.Scope = ptr.To(admissionregistrationv1.AllScopes)
	}
}

func readWebhooks(path string) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cfg admissionregistrationv1.ValidatingWebhookConfiguration
	if err := utilyaml.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return &cfg, nil
}

// CompilePolicy compiles p as the API server's ValidatingAdmissionPolicy
// plugin does (k8s.io/apiserver/pkg/admission/plugin/policy/validating,
// compilePolicy, which it does not export): variables, validations and
// matchConditions with the authorizer and params declared, message
// expressions without the authorizer, in the composition environment of
// the default compatibility version, as stored expressions.
func CompilePolicy(p *admissionregistrationv1.ValidatingAdmissionPolicy) validating.Validator {
	hasParam := p.Spec.ParamKind != nil
	optionalVars := admissioncel.OptionalVariableDeclarations{HasParams: hasParam, HasAuthorizer: true}
	messageVars := admissioncel.OptionalVariableDeclarations{HasParams: hasParam, HasAuthorizer: false}
	compiler, err := admissioncel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		return validating.NewValidator(nil, nil, nil, nil, p.Spec.FailurePolicy, err)
	}
	variables := make([]admissioncel.NamedExpressionAccessor, len(p.Spec.Variables))
	for i, v := range p.Spec.Variables {
		variables[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
	}
	compiler.CompileAndStoreVariables(variables, optionalVars, environment.StoredExpressions)
	var matcher matchconditions.Matcher
	if len(p.Spec.MatchConditions) > 0 {
		conditions := make([]admissioncel.ExpressionAccessor, len(p.Spec.MatchConditions))
		for i := range p.Spec.MatchConditions {
			conditions[i] = (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i])
		}
		matcher = matchconditions.NewMatcher(compiler.CompileCondition(conditions, optionalVars, environment.StoredExpressions), p.Spec.FailurePolicy, "policy", "validate", p.Name)
	}
	validations := make([]admissioncel.ExpressionAccessor, len(p.Spec.Validations))
	messages := make([]admissioncel.ExpressionAccessor, len(p.Spec.Validations))
	for i, v := range p.Spec.Validations {
		validations[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			messages[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	audit := make([]admissioncel.ExpressionAccessor, len(p.Spec.AuditAnnotations))
	for i, v := range p.Spec.AuditAnnotations {
		audit[i] = &validating.AuditAnnotationCondition{Key: v.Key, ValueExpression: v.ValueExpression}
	}
	return validating.NewValidator(
		compiler.CompileCondition(validations, optionalVars, environment.StoredExpressions),
		matcher,
		compiler.CompileCondition(audit, optionalVars, environment.StoredExpressions),
		compiler.CompileCondition(messages, messageVars, environment.StoredExpressions),
		p.Spec.FailurePolicy, nil)
}

// Admit judges r against w: nil if the write is admitted, else the error
// the API server would answer with (a *apierrors.StatusError).
func (a *Admission) Admit(ctx context.Context, w World, r Request) error {
	st, err := a.state(ctx, w)
	if err != nil {
		return fmt.Errorf("setting up the world: %w", err)
	}
	attr := r.attributes()
	o := admission.NewObjectInterfacesFromScheme(scheme())
	// The admission chain's order: policies before webhooks.
	if len(a.hooks) > 0 {
		d := validating.NewDispatcher(noOpinion{}, generic.NewPolicyMatcher(matching.NewMatcher(st.nsLister, nil)))
		hooks := slices.Clone(a.hooks)
		for i := range hooks {
			if hooks[i].Policy.Spec.ParamKind != nil {
				hooks[i].ParamInformer, hooks[i].ParamScope = st.params, meta.RESTScopeNamespace
			}
		}
		if err := d.Dispatch(ctx, attr, o, hooks); err != nil {
			return err
		}
	}
	return a.callWebhooks(ctx, st, attr, o)
}

// state is a world stored: the clients the handlers read and the listers
// the matchers read.
type state struct {
	client client.Client
	// nsLister lists World.Namespaces: the API server's namespace matchers
	// read a namespace from their client only when their lister misses it,
	// and they have none here (every write's namespace is in the world).
	nsLister corelisters.NamespaceLister
	params   informers.GenericInformer
	handlers map[string]http.Handler
}

func (a *Admission) state(ctx context.Context, w World) (*state, error) {
	s := scheme()
	objs := []client.Object{}
	nsIndexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, ns := range w.Namespaces {
		objs = append(objs, ns.DeepCopy())
		if err := nsIndexer.Add(ns.DeepCopy()); err != nil {
			return nil, err
		}
	}
	for i, l := range w.Leases {
		l = l.DeepCopy()
		if l.UID == "" {
			l.UID = types.UID(fmt.Sprintf("lease-%d", i))
		}
		objs = append(objs, l)
	}
	if a.mode == operator.EnforcementPolicy {
		objs = append(objs, a.settings.FencingPolicy())
	}
	c, err := newStore(objs...)
	if err != nil {
		return nil, err
	}
	st := &state{client: c, nsLister: corelisters.NewNamespaceLister(nsIndexer)}

	paramIndexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if a.mode == operator.EnforcementPolicy {
		tenures := &policy.Tenures{Table: &policy.Table{Reader: c, Writer: c}, Leases: c}
		for _, d := range w.Deleted {
			gone := &coordv1alpha1.FencedLease{}
			gone.Namespace, gone.Name, gone.UID = d.Namespace, d.Name, types.UID("deleted-"+d.Name)
			if err := tenures.Deleted(ctx, gone, d.High); err != nil {
				return nil, err
			}
		}
		var namespaces []string
		for _, l := range w.Leases {
			var live coordv1alpha1.FencedLease
			if err := c.Get(ctx, client.ObjectKeyFromObject(l), &live); err != nil {
				return nil, err
			}
			if err := tenures.Sync(ctx, &live); err != nil {
				return nil, err
			}
			namespaces = append(namespaces, l.Namespace)
		}
		for _, d := range w.Deleted {
			namespaces = append(namespaces, d.Namespace)
		}
		slices.Sort(namespaces)
		for _, ns := range slices.Compact(namespaces) {
			var cm corev1.ConfigMap
			err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: coordv1alpha1.TenureTableName}, &cm)
			if err != nil {
				return nil, err
			}
			table := &cm
			if w.Table != nil {
				table = w.Table(ns, table)
			}
			if table == nil {
				if err := c.Delete(ctx, &cm); err != nil {
					return nil, err
				}
				continue
			}
			if err := c.Update(ctx, table); err != nil {
				return nil, err
			}
			if err := paramIndexer.Add(table.DeepCopy()); err != nil {
				return nil, err
			}
		}
	}
	st.params = syncedInformer{indexer: paramIndexer}

	clk := clocktesting.NewFakePassiveClock(w.Now)
	o := a.options
	leases := &fencing.LeaseReader{Reader: c}
	if a.mode == operator.EnforcementPolicy {
		// As operator.Setup wires it in policy mode.
		table := &policy.Table{Reader: leases.Reader}
		leases.Tenures = func(ctx context.Context, ns, name string) (int64, bool, error) {
			e, found, err := table.Get(ctx, ns, name)
			return e.Token, found && e.Held, err
		}
	}
	base := fencing.Handler{Leases: leases, Clock: clk, Skew: o.WebhookSkew, CommitLag: o.Timing.CommitLag, CleanupUsers: o.CleanupUsers}
	if len(w.Objects) > 0 {
		var parents []runtime.Object
		for _, p := range w.Objects {
			parents = append(parents, p.DeepCopy())
		}
		listKinds := map[schema.GroupVersionResource]string{
			{Group: "example.kubefence.io", Version: "v1", Resource: "widgets"}: "WidgetList",
			{Version: "v1", Resource: "pods"}:                                   "PodList",
		}
		base.Parents = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, parents...)
	}
	st.handlers = map[string]http.Handler{}
	for mode, path := range map[fencing.Mode]string{fencing.ModeGuarded: coordv1alpha1.FencingGuardedPath, fencing.ModeRequired: coordv1alpha1.FencingRequiredPath, fencing.ModeScale: coordv1alpha1.FencingScalePath} {
		h := base
		h.Mode = mode
		st.handlers[path] = &crwebhook.Admission{Handler: &h}
	}
	st.handlers[coordv1alpha1.FencingPodScopePath] = &crwebhook.Admission{Handler: fencing.PodScopeHandler{}}
	// As operator.Setup sets the FencedLease validator up.
	v := &leasewebhook.FencedLeaseValidator{ControllerUsers: o.ControllerUsers, AdminGroups: o.AdminGroups,
		CleanupUsers: o.CleanupUsers, ExcludedNamespaces: o.PolicySettings().ExcludedNamespaces, Clock: clk, StampSkew: o.WebhookSkew}
	if a.mode == operator.EnforcementWebhook {
		skew, lag := o.WebhookSkew, o.Timing.CommitLag
		v.DurationWarning = func(l time.Duration) string { return fencing.ShortLeaseWarning(l, skew, lag) }
	}
	st.handlers["/validate-coordination-kubefence-io-v1alpha1-fencedlease"] = cradmission.WithValidator(s, v)
	return st, nil
}

// callWebhooks calls every webhook whose selectors, rules and match
// conditions select the request, as the API server's validating webhook
// dispatcher does (generic.Webhook.ShouldCallHook, validatingDispatcher),
// one after the other, and returns the first refusal.
func (a *Admission) callWebhooks(ctx context.Context, st *state, attr admission.Attributes, o admission.ObjectInterfaces) error {
	nsMatcher := &namespace.Matcher{NamespaceLister: st.nsLister}
	for _, h := range a.webhooks {
		if ok, err := nsMatcher.MatchNamespaceSelector(h, attr); err != nil {
			return err
		} else if !ok {
			continue
		}
		if ok, err := (&object.Matcher{}).MatchObjectSelector(h, attr); err != nil {
			return err
		} else if !ok {
			continue
		}
		var invocation *webhookgeneric.WebhookInvocation
		for _, rule := range h.GetRules() {
			if (&rules.Matcher{Rule: rule, Attr: attr}).Matches() {
				invocation = &webhookgeneric.WebhookInvocation{Webhook: h, Resource: attr.GetResource(), Subresource: attr.GetSubresource(), Kind: attr.GetKind()}
				break
			}
		}
		if invocation == nil {
			continue
		}
		versioned, err := admission.NewVersionedAttributes(attr, invocation.Kind, o)
		if err != nil {
			return err
		}
		if len(h.GetMatchConditions()) > 0 {
			res := h.GetCompiledMatcher(a.compiler).Match(ctx, versioned, nil, noOpinion{})
			if res.Error != nil {
				return fmt.Errorf("webhook %s: match conditions: %w", h.GetName(), res.Error)
			}
			if !res.Matches {
				continue
			}
		}
		if err := a.call(ctx, st, h, invocation, versioned); err != nil {
			return err
		}
	}
	return nil
}

// call sends one webhook its AdmissionReview, in process over HTTP, and
// reads its answer as the API server's validating dispatcher does.
func (a *Admission) call(ctx context.Context, st *state, h webhook.WebhookAccessor, invocation *webhookgeneric.WebhookInvocation, versioned *admission.VersionedAttributes) error {
	cfg, _ := h.GetValidatingWebhook()
	path := ""
	if cfg.ClientConfig.Service != nil && cfg.ClientConfig.Service.Path != nil {
		path = *cfg.ClientConfig.Service.Path
	}
	handler, ok := st.handlers[path]
	if !ok {
		return fmt.Errorf("webhook %s: no handler serves path %q", h.GetName(), path)
	}
	uid := uuid.NewUUID()
	review := webhookrequest.CreateV1AdmissionReview(uid, versioned, invocation)
	body, err := json.Marshal(review)
	if err != nil {
		return err
	}
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return fmt.Errorf("webhook %s answered HTTP %d: %s", h.GetName(), rec.Code, rec.Body.String())
	}
	var answer admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil {
		return fmt.Errorf("webhook %s: %w", h.GetName(), err)
	}
	answer.SetGroupVersionKind(admissionv1.SchemeGroupVersion.WithKind("AdmissionReview"))
	result, err := webhookrequest.VerifyAdmissionResponse(uid, false, &answer)
	if err != nil {
		return fmt.Errorf("webhook %s: invalid response: %w", h.GetName(), err)
	}
	if result.Allowed {
		return nil
	}
	return webhookerrors.ToStatusErr(h.GetName(), result.Result)
}

func (r Request) attributes() admission.Attributes {
	var obj, old runtime.Object
	if r.Object != nil {
		obj = r.Object.DeepCopy()
	}
	if r.OldObject != nil {
		old = r.OldObject.DeepCopy()
	}
	return admission.NewAttributesRecord(obj, old, r.Kind, r.Namespace, r.Name, r.Resource, r.SubResource, r.Operation, nil, false, r.User)
}

// noOpinion is the authorizer of the policies' and match conditions'
// authorizer variable: none of kubefence's expressions asks it.
type noOpinion struct{}

func (noOpinion) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	return authorizer.DecisionNoOpinion, "", nil
}

// syncedInformer is the param informer of the fencing policy: the tenure
// tables, listed from an indexer that is always synced.
type syncedInformer struct{ indexer cache.Indexer }

func (s syncedInformer) Informer() cache.SharedIndexInformer { return synced{} }
func (s syncedInformer) Lister() cache.GenericLister {
	return cache.NewGenericLister(s.indexer, corev1.Resource("configmaps"))
}

// synced is an informer that has synced; the dispatcher asks nothing else.
type synced struct{ cache.SharedIndexInformer }

func (synced) HasSynced() bool { return true }

var (
	schemeOnce sync.Once
	theScheme  *runtime.Scheme
)

func scheme() *runtime.Scheme {
	schemeOnce.Do(func() {
		theScheme = runtime.NewScheme()
		if err := clientgoscheme.AddToScheme(theScheme); err != nil {
			panic(err)
		}
		if err := coordv1alpha1.AddToScheme(theScheme); err != nil {
			panic(err)
		}
	})
	return theScheme
}
