package inprocess

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// store is the world's objects, read and written by the operator's code
// the way it reads and writes the API server: get, create, update (with a
// resourceVersion check) and delete of typed objects. It is a map: the
// fuzzer builds thousands of worlds, and controller-runtime's fake client
// builds a REST mapper for each. Any other method panics (the embedded
// client.Client is nil).
type store struct {
	client.Client
	mu      sync.Mutex
	objects map[key]client.Object
	version int
}

type key struct {
	gvk             schema.GroupVersionKind
	namespace, name string
}

func newStore(objs ...client.Object) (*store, error) {
	s := &store{objects: map[key]client.Object{}}
	for _, o := range objs {
		if err := s.Create(context.Background(), o); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *store) key(obj client.Object) (key, error) {
	gvk, err := apiutil.GVKForObject(obj, scheme())
	return key{gvk, obj.GetNamespace(), obj.GetName()}, err
}

// resource is the group and resource an API error names for k's object.
func (k key) resource() schema.GroupResource {
	return schema.GroupResource{Group: k.gvk.Group, Resource: k.gvk.Kind}
}

func notFound(k key) error { return apierrors.NewNotFound(k.resource(), k.name) }

// put stores obj as a new version under k and sets its resourceVersion to
// that version's; s.mu is held.
func (s *store) put(k key, obj client.Object) {
	s.version++
	obj.SetResourceVersion(strconv.Itoa(s.version))
	s.objects[k] = obj.DeepCopyObject().(client.Object)
}

func (s *store) Scheme() *runtime.Scheme { return scheme() }

func (s *store) Get(_ context.Context, k client.ObjectKey, into client.Object, _ ...client.GetOption) error {
	into.SetNamespace(k.Namespace)
	into.SetName(k.Name)
	kk, err := s.key(into)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[kk]
	if !ok {
		return notFound(kk)
	}
	reflect.ValueOf(into).Elem().Set(reflect.ValueOf(o.DeepCopyObject()).Elem())
	return nil
}

func (s *store) Create(_ context.Context, obj client.Object, _ ...client.CreateOption) error {
	k, err := s.key(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.objects[k]; ok {
		return apierrors.NewAlreadyExists(k.resource(), k.name)
	}
	s.put(k, obj)
	return nil
}

func (s *store) Update(_ context.Context, obj client.Object, _ ...client.UpdateOption) error {
	k, err := s.key(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.objects[k]
	if !ok {
		return notFound(k)
	}
	if obj.GetResourceVersion() != cur.GetResourceVersion() {
		return apierrors.NewConflict(k.resource(), k.name,
			fmt.Errorf("resourceVersion %s, stored %s", obj.GetResourceVersion(), cur.GetResourceVersion()))
	}
	s.put(k, obj)
	return nil
}

func (s *store) Delete(_ context.Context, obj client.Object, _ ...client.DeleteOption) error {
	k, err := s.key(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.objects[k]; !ok {
		return notFound(k)
	}
	delete(s.objects, k)
	return nil
}
