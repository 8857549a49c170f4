package controllers

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// +kubebuilder:rbac:groups="",namespace=system,resources=configmaps,verbs=get;create;update

// EpochStore remembers, per lease name, the highest fencing token ever
// published, so that a FencedLease deleted and created again continues above it
// (I1). It is one ConfigMap in the operator's namespace with one key per lease,
// "<namespace>.<name>" (a namespace holds no dot, so the key is unambiguous).
// Entries are never removed: forgetting one would let a recreated lease reissue
// old tokens.
type EpochStore struct {
	// Reader reads the ConfigMap directly from the API server (not from a cache,
	// which could be stale and would watch every ConfigMap in the cluster).
	Reader client.Reader
	// Writer creates and updates the ConfigMap.
	Writer client.Client
	// Namespace and Name locate the ConfigMap.
	Namespace, Name string
}

// DefaultEpochStoreName is the ConfigMap's name.
const DefaultEpochStoreName = "kubefence-epochs"

func epochKey(leaseNamespace, leaseName string) string {
	return leaseNamespace + "." + leaseName
}

// Get returns the highest token recorded for the lease name, 0 if none.
func (s *EpochStore) Get(ctx context.Context, leaseNamespace, leaseName string) (int64, error) {
	var cm corev1.ConfigMap
	err := s.Reader.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Name}, &cm)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading epoch store %s/%s: %w", s.Namespace, s.Name, err)
	}
	return parseEpoch(cm.Data, leaseNamespace, leaseName)
}

func parseEpoch(data map[string]string, leaseNamespace, leaseName string) (int64, error) {
	v, ok := data[epochKey(leaseNamespace, leaseName)]
	if !ok {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("epoch store entry %q holds %q: expected a non-negative integer", epochKey(leaseNamespace, leaseName), v)
	}
	return n, nil
}

// Record raises the stored token for the lease name to at least token.
func (s *EpochStore) Record(ctx context.Context, leaseNamespace, leaseName string, token int64) error {
	key := epochKey(leaseNamespace, leaseName)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cm corev1.ConfigMap
		err := s.Reader.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Name}, &cm)
		if apierrors.IsNotFound(err) {
			cm = corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name,
					Labels: map[string]string{"app.kubernetes.io/managed-by": "kubefence"}},
				Data: map[string]string{key: strconv.FormatInt(token, 10)},
			}
			if err := s.Writer.Create(ctx, &cm); err != nil {
				if apierrors.IsAlreadyExists(err) {
					return apierrors.NewConflict(corev1.Resource("configmaps"), s.Name, err)
				}
				return fmt.Errorf("creating epoch store %s/%s: %w", s.Namespace, s.Name, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading epoch store %s/%s: %w", s.Namespace, s.Name, err)
		}
		cur, err := parseEpoch(cm.Data, leaseNamespace, leaseName)
		if err != nil {
			return err
		}
		if cur >= token {
			return nil
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[key] = strconv.FormatInt(token, 10)
		return s.Writer.Update(ctx, &cm)
	})
}
