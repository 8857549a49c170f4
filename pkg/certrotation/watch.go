package certrotation

import (
	"context"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
)

// runWatches nudges the loop whenever the Secret or one of the webhook
// configurations changes, until ctx is done. Each informer lists and watches
// one object by metadata.name: the API server authorizes such a list or watch
// against RBAC resourceNames, and nothing else is cached. A failing watch
// (say, forbidden) only delays changes to the next periodic check.
func (r *Rotator) runWatches(ctx context.Context, clientset kubernetes.Interface) {
	handler := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { r.nudge() },
		UpdateFunc: func(any, any) { r.nudge() },
		DeleteFunc: func(any) { r.nudge() },
	}
	var wg sync.WaitGroup
	run := func(lw toolscache.ListerWatcher, obj runtime.Object) {
		_, informer := toolscache.NewInformerWithOptions(toolscache.InformerOptions{
			ListerWatcher: lw, ObjectType: obj, Handler: handler,
		})
		wg.Go(func() { informer.RunWithContext(ctx) })
	}
	run(byName(clientset.CoreV1().Secrets(r.opts.SecretKey.Namespace), r.opts.SecretKey.Name), &corev1.Secret{})
	for _, name := range r.opts.WebhookConfigurations {
		run(byName(clientset.AdmissionregistrationV1().ValidatingWebhookConfigurations(), name),
			&admissionregistrationv1.ValidatingWebhookConfiguration{})
	}
	wg.Wait()
}

// listWatcher is what the typed clients of client-go have in common.
type listWatcher[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// byName lists and watches the one object of c called name.
func byName[L runtime.Object](c listWatcher[L], name string) *toolscache.ListWatch {
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	return &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			return c.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			return c.Watch(ctx, opts)
		},
	}
}
