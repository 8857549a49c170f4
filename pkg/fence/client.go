package fence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// ErrNotLeading is returned, without sending anything, by a fenced client whose
// token source does not lead (or whose local deadline has passed).
var ErrNotLeading = errors.New("not leading: no current fencing token")

// ErrUnfenceable is returned, wrapped and without sending anything, by a fenced
// client asked to write an object its lease cannot fence: a cluster-scoped
// object (or one whose namespace is not set), or, when the client knows the
// lease's namespace (ClientConfig.Namespace; an Elector's, a resourcelock
// Lock's and the fenced manager's client do), an object in another
// namespace. The guard label names a FencedLease in the object's own
// namespace, so a token stamped there would be checked by no lease (the
// webhook and the policy refuse a guard on cluster-scoped objects) or by a
// different lease of the same name. Write such objects with an unfenced
// client, knowing that nothing fences them, or with the client of a lease in
// their namespace (docs/design.md, I5).
var ErrUnfenceable = errors.New("fence: the lease cannot fence this object")

// StaleError is a write refused because this holder's token is no longer
// current: the lease moved on. The holder must stop.
type StaleError struct {
	// Lease is the namespace/name of the lease.
	Lease string
	// Err is the API server's answer.
	Err error
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("write refused as stale (lease %s): %v", e.Lease, e.Err)
}

func (e *StaleError) Unwrap() error { return e.Err }

// IsStale tells whether err is a refusal of the fencing webhook because the
// presented token (or the writer's tenure) is stale. It is false for ordinary
// optimistic-concurrency conflicts.
//
// It reads the refusal's typed causes (coordv1alpha1.CauseTypeStaleFencingToken)
// and, for a refusal without them (an admission policy can set only the
// message), the fixed markers coordv1alpha1.StaleMarker (409) and
// coordv1alpha1.NotHolderMarker (403). The rest of the message may be reworded.
func IsStale(err error) bool {
	var se *StaleError
	if errors.As(err, &se) {
		return true
	}
	_, stale := staleLease(err)
	return stale
}

// staleLease tells whether err is a stale refusal and, when its causes say
// so, the lease ("namespace/name") it is about.
func staleLease(err error) (lease string, stale bool) {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return "", false
	}
	s := st.Status()
	if s.Details != nil {
		for _, c := range s.Details.Causes {
			if c.Type != coordv1alpha1.CauseTypeStaleFencingToken {
				continue
			}
			stale = true
			if c.Field == coordv1alpha1.CauseFieldLease {
				lease = c.Message
			}
		}
		if stale {
			return lease, true
		}
	}
	return "", (s.Code == http.StatusConflict && strings.Contains(s.Message, coordv1alpha1.StaleMarker)) ||
		(s.Code == http.StatusForbidden && strings.Contains(s.Message, coordv1alpha1.NotHolderMarker))
}

// TokenSource gives the current fencing token while its holder leads. An
// *Elector is one, and a WriteCounter too.
type TokenSource interface {
	Token() (int64, bool)
}

// FencedClient wraps a controller-runtime client so that every create, update,
// patch (merge, strategic, JSON patch and server-side apply), apply (of an
// apply configuration) and delete of an
// object is guarded by the lease and stamped with the current token, and every
// status or scale write is sent only while the holder leads. A refusal as
// stale is returned as *StaleError and reported to ClientConfig.OnStale.
// With a WriteCounter token source, each write is counted in flight from the
// moment it takes its token until it returns, so that a release waits for it.
type FencedClient struct {
	client.Client
	lease  string
	tokens TokenSource
	cfg    ClientConfig
}

// ClientConfig is what a FencedClient does besides fencing. The zero value
// does nothing more.
type ClientConfig struct {
	// OnStale is called with every write refused as stale (a *StaleError),
	// synchronously on the goroutine that made the write, before the write
	// returns. An Elector's client steps down.
	OnStale func(error)
	// Metrics, if set, times every write (kubefence_client_write_duration_seconds)
	// and counts stale refusals (kubefence_client_stale_refusals_total). An
	// Elector's client takes its Config.Metrics.
	Metrics *Metrics
	// Namespace, if set, is the lease's namespace: writes of objects in any
	// other namespace are refused locally (ErrUnfenceable), since the webhook
	// would check their guard against another lease of the same name. An
	// Elector's client takes its Config.Namespace. Unset, the client fences
	// each object with the lease of its name in the object's namespace, and
	// its token source must be that lease's.
	Namespace string
}

// NewFencedClient returns a client fencing writes with the lease of that name
// (in each object's namespace, which must be ClientConfig.Namespace when set)
// and the tokens of src. Cluster-scoped objects are never written
// (ErrUnfenceable). At most one ClientConfig may be given.
func NewFencedClient(c client.Client, lease string, src TokenSource, cfg ...ClientConfig) *FencedClient {
	fc := &FencedClient{Client: c, lease: lease, tokens: src}
	switch len(cfg) {
	case 0:
	case 1:
		fc.cfg = cfg[0]
	default:
		panic("fence.NewFencedClient: at most one ClientConfig")
	}
	return fc
}

// Client returns a FencedClient stamping this Elector's token; a stale refusal
// makes the Elector step down at once.
func (e *Elector) Client(c client.Client) *FencedClient {
	return NewFencedClient(c, e.cfg.Name, e, ClientConfig{OnStale: func(error) { e.StepDown() }, Metrics: e.cfg.Metrics, Namespace: e.cfg.Namespace})
}

// fenceable refuses (ErrUnfenceable) an object whose guard no lease would
// check: one without a namespace (cluster-scoped, or its namespace unset),
// or one outside the lease's namespace when the client knows it.
func (c *FencedClient) fenceable(obj client.Object) error {
	ns := obj.GetNamespace()
	switch {
	case ns == "":
		return fmt.Errorf("%w: %s %q has no namespace (it is cluster-scoped, or its namespace is not set), and the %s label names a FencedLease in the object's own namespace, so no lease could check the token; "+
			"set the object's namespace, or write a cluster-scoped object with an unfenced client (nothing fences it: admission refuses the guard on cluster-scoped objects)",
			ErrUnfenceable, kindOf(obj), obj.GetName(), coordv1alpha1.GuardLeaseLabel)
	case c.cfg.Namespace != "" && ns != c.cfg.Namespace:
		return fmt.Errorf("%w: %s %s/%s is outside namespace %s of lease %s/%s, and admission checks the %s label against the FencedLease of that name in the object's own namespace (%s/%s), not this one; "+
			"write it with the fenced client of a lease in namespace %s, or with an unfenced client (nothing fences it)",
			ErrUnfenceable, kindOf(obj), ns, obj.GetName(), c.cfg.Namespace, c.cfg.Namespace, c.lease, coordv1alpha1.GuardLeaseLabel, ns, c.lease, ns)
	}
	return nil
}

// kindOf names obj's kind for a message: its GroupVersionKind's, or its Go type.
func kindOf(obj runtime.Object) string {
	if k := obj.GetObjectKind().GroupVersionKind().Kind; k != "" {
		return k
	}
	return fmt.Sprintf("%T", obj)
}

// begin takes the token of one write; from a WriteCounter (an Elector, a
// resourcelock Lock) it also counts the write in flight, in the same step, so
// that a release waits for it. end must be called with the write's error.
func (c *FencedClient) begin() (token int64, end func(error), err error) {
	if wc, ok := c.tokens.(WriteCounter); ok {
		return wc.Writes().Begin(c.tokens)
	}
	t, ok := c.tokens.Token()
	if !ok {
		return 0, nil, ErrNotLeading
	}
	return t, func(error) {}, nil
}

// write sends one write with the token (send), counted in flight and timed
// while it runs, and checks its answer for a stale refusal about obj's lease.
func (c *FencedClient) write(obj client.Object, send func(token int64) error) error {
	if err := c.fenceable(obj); err != nil {
		return err
	}
	t, end, err := c.begin()
	if err != nil {
		return err
	}
	err = c.timed(obj.GetNamespace(), func() error { return send(t) })
	end(err)
	return c.check(obj, err)
}

// timed runs send and records its round trip in the write histogram.
func (c *FencedClient) timed(namespace string, send func() error) error {
	start := time.Now()
	err := send()
	c.cfg.Metrics.observeWrite(namespace, c.lease, err, time.Since(start))
	return err
}

// stamp sets the guard label and the token annotation on obj.
func (c *FencedClient) stamp(obj client.Object, token int64) {
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[coordv1alpha1.GuardLeaseLabel] = c.lease
	obj.SetLabels(labels)
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[coordv1alpha1.FencingTokenAnnotation] = strconv.FormatInt(token, 10)
	obj.SetAnnotations(ann)
}

func (c *FencedClient) check(obj client.Object, err error) error {
	scope := obj.GetNamespace() + "/" + c.lease
	// Only a refusal about this client's own lease means its tenure is over; an
	// object guarded by another lease refuses it for reasons of that lease.
	if err == nil || !IsStale(err) {
		return err
	}
	if lease, _ := staleLease(err); lease != scope && (lease != "" || !strings.Contains(err.Error(), "lease "+scope)) {
		// The cause names another lease; or, without causes, the message does
		// not name this one.
		return err
	}
	se := &StaleError{Lease: scope, Err: err}
	c.cfg.Metrics.staleRefusal(obj.GetNamespace(), c.lease)
	if c.cfg.OnStale != nil {
		c.cfg.OnStale(se)
	}
	return se
}

// Create stamps and creates obj.
func (c *FencedClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	return c.write(obj, func(t int64) error {
		c.stamp(obj, t)
		return c.Client.Create(ctx, obj, opts...)
	})
}

// Update stamps and updates obj.
func (c *FencedClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return c.write(obj, func(t int64) error {
		c.stamp(obj, t)
		return c.Client.Update(ctx, obj, opts...)
	})
}

// Patch adds the guard label and the token to the patch, whatever its type.
func (c *FencedClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return c.write(obj, func(t int64) error {
		return c.Client.Patch(ctx, obj, &stampedPatch{Patch: patch, lease: c.lease, token: t}, opts...)
	})
}

// Delete sends the delete only while leading; the webhook checks that the
// requester is the lease's current holder (DELETE carries no object).
func (c *FencedClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	return c.write(obj, func(int64) error { return c.Client.Delete(ctx, obj, opts...) })
}

// Apply stamps the guard label and the token on a server-side apply
// configuration (any runtime.ApplyConfiguration: client-go's typed ones, or
// client.ApplyConfigurationFromUnstructured) and applies it. The field manager
// of the apply (client.FieldOwner) then owns the label and the annotation too.
// On success the API server's answer is written back into obj, as the
// controller-runtime client does.
func (c *FencedClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	t, end, err := c.begin()
	if err != nil {
		return err
	}
	u, err := stampApplyConfiguration(obj, c.lease, t)
	if err == nil {
		err = c.fenceable(u)
	}
	if err != nil {
		end(nil) // nothing was sent
		return err
	}
	err = c.timed(u.GetNamespace(), func() error { return c.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), opts...) })
	end(err)
	if err := c.check(u, err); err != nil {
		return err
	}
	answer, err := json.Marshal(u)
	if err != nil {
		return fmt.Errorf("fence: reading the applied object: %w", err)
	}
	if err := json.Unmarshal(answer, obj); err != nil {
		return fmt.Errorf("fence: writing the applied object into %T: %w", obj, err)
	}
	return nil
}

// stampApplyConfiguration returns obj as an unstructured object with the
// guard label and the token annotation set, leaving obj as it is.
func stampApplyConfiguration(obj runtime.ApplyConfiguration, lease string, token int64) (*unstructured.Unstructured, error) {
	if obj == nil {
		return nil, errors.New("fence: Apply with a nil apply configuration")
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("fence: reading apply configuration %T: %w", obj, err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		return nil, fmt.Errorf("fence: apply configuration %T is not an object with apiVersion and kind: %w", obj, err)
	}
	if err := unstructured.SetNestedField(u.Object, lease, "metadata", "labels", coordv1alpha1.GuardLeaseLabel); err != nil {
		return nil, fmt.Errorf("fence: setting the guard label on %T: %w", obj, err)
	}
	if err := unstructured.SetNestedField(u.Object, strconv.FormatInt(token, 10), "metadata", "annotations", coordv1alpha1.FencingTokenAnnotation); err != nil {
		return nil, fmt.Errorf("fence: setting the token annotation on %T: %w", obj, err)
	}
	return u, nil
}

// DeleteAllOf is refused: a collection delete cannot be fenced object by object.
func (c *FencedClient) DeleteAllOf(context.Context, client.Object, ...client.DeleteAllOfOption) error {
	return errors.New("fence: DeleteAllOf cannot be fenced; delete guarded objects one by one")
}

// Status returns a writer for the status subresource, fenced by holder identity.
func (c *FencedClient) Status() client.SubResourceWriter {
	return &fencedSubResource{SubResourceClient: c.Client.SubResource("status"), c: c}
}

// SubResource returns a client for a subresource (status, scale), fenced by
// holder identity.
func (c *FencedClient) SubResource(name string) client.SubResourceClient {
	return &fencedSubResource{SubResourceClient: c.Client.SubResource(name), c: c}
}

type fencedSubResource struct {
	client.SubResourceClient
	c *FencedClient
}

func (s *fencedSubResource) Create(ctx context.Context, obj, sub client.Object, opts ...client.SubResourceCreateOption) error {
	return s.c.write(obj, func(int64) error { return s.SubResourceClient.Create(ctx, obj, sub, opts...) })
}

func (s *fencedSubResource) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return s.c.write(obj, func(int64) error { return s.SubResourceClient.Update(ctx, obj, opts...) })
}

func (s *fencedSubResource) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return s.c.write(obj, func(int64) error { return s.SubResourceClient.Patch(ctx, obj, patch, opts...) })
}

// stampedPatch adds the guard label and token annotation to any patch.
type stampedPatch struct {
	client.Patch
	lease string
	token int64
}

func (p *stampedPatch) Data(obj client.Object) ([]byte, error) {
	data, err := p.Patch.Data(obj)
	if err != nil {
		return nil, err
	}
	tok := strconv.FormatInt(p.token, 10)
	switch p.Type() {
	case types.JSONPatchType:
		var ops []map[string]any
		if err := json.Unmarshal(data, &ops); err != nil {
			return nil, fmt.Errorf("fence: reading JSON patch: %w", err)
		}
		ops = append(ops, mapAddOps("/metadata/labels", obj.GetLabels() != nil, coordv1alpha1.GuardLeaseLabel, p.lease)...)
		ops = append(ops, mapAddOps("/metadata/annotations", obj.GetAnnotations() != nil, coordv1alpha1.FencingTokenAnnotation, tok)...)
		return json.Marshal(ops)
	default: // merge, strategic merge and apply patches are (partial) objects
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("fence: reading %s patch: %w", p.Type(), err)
		}
		if m == nil {
			m = map[string]any{}
		}
		meta, _ := m["metadata"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
		}
		setIn(meta, "labels", coordv1alpha1.GuardLeaseLabel, p.lease)
		setIn(meta, "annotations", coordv1alpha1.FencingTokenAnnotation, tok)
		m["metadata"] = meta
		return json.Marshal(m)
	}
}

func setIn(meta map[string]any, field, key, value string) {
	sub, _ := meta[field].(map[string]any)
	if sub == nil {
		sub = map[string]any{}
	}
	sub[key] = value
	meta[field] = sub
}

// mapAddOps sets key in the map at path, creating the map when the object has none.
func mapAddOps(path string, exists bool, key, value string) []map[string]any {
	if !exists {
		return []map[string]any{{"op": "add", "path": path, "value": map[string]string{key: value}}}
	}
	escaped := strings.NewReplacer("~", "~0", "/", "~1").Replace(key)
	return []map[string]any{{"op": "add", "path": path + "/" + escaped, "value": value}}
}
