package fencedlease

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// The shards live in every lease's namespace: creating them cannot be
// restricted by name (RBAC sees no name on a create), reading and updating
// them is restricted to the 64 shard names.
//
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=create
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;update,resourceNames=kubefence-epochs-00;kubefence-epochs-01;kubefence-epochs-02;kubefence-epochs-03;kubefence-epochs-04;kubefence-epochs-05;kubefence-epochs-06;kubefence-epochs-07;kubefence-epochs-08;kubefence-epochs-09;kubefence-epochs-0a;kubefence-epochs-0b;kubefence-epochs-0c;kubefence-epochs-0d;kubefence-epochs-0e;kubefence-epochs-0f;kubefence-epochs-10;kubefence-epochs-11;kubefence-epochs-12;kubefence-epochs-13;kubefence-epochs-14;kubefence-epochs-15;kubefence-epochs-16;kubefence-epochs-17;kubefence-epochs-18;kubefence-epochs-19;kubefence-epochs-1a;kubefence-epochs-1b;kubefence-epochs-1c;kubefence-epochs-1d;kubefence-epochs-1e;kubefence-epochs-1f;kubefence-epochs-20;kubefence-epochs-21;kubefence-epochs-22;kubefence-epochs-23;kubefence-epochs-24;kubefence-epochs-25;kubefence-epochs-26;kubefence-epochs-27;kubefence-epochs-28;kubefence-epochs-29;kubefence-epochs-2a;kubefence-epochs-2b;kubefence-epochs-2c;kubefence-epochs-2d;kubefence-epochs-2e;kubefence-epochs-2f;kubefence-epochs-30;kubefence-epochs-31;kubefence-epochs-32;kubefence-epochs-33;kubefence-epochs-34;kubefence-epochs-35;kubefence-epochs-36;kubefence-epochs-37;kubefence-epochs-38;kubefence-epochs-39;kubefence-epochs-3a;kubefence-epochs-3b;kubefence-epochs-3c;kubefence-epochs-3d;kubefence-epochs-3e;kubefence-epochs-3f

// EpochStore remembers, per lease name, the highest fencing token ever
// published, so that a FencedLease deleted and created again continues above it
// (I1).
//
// Layout (its names are in api/v1alpha1/names.go): in the lease's OWN
// namespace, EpochShards ConfigMaps named
// "kubefence-epochs-00" to "kubefence-epochs-3f", created when first written.
// A lease name lives in shard fnv32a(name) mod EpochShards, as the line
// "<EpochKey(name)> <token>" of the shard's one data key EpochDataKey (the key
// is the name itself, or "_" and a hash for names longer than 63 characters,
// so that a line is at most 84 bytes). A shard refuses to grow past
// EpochShardBudget bytes of data, which keeps every object under 512 KiB.
//
// Because the history sits beside the leases, it survives deleting and
// reinstalling the operator and its namespace; and it is pruned with the
// namespace: deleting a namespace deletes its leases, its guarded objects and
// its epoch shards together (docs/design.md, I1). Within a live namespace
// entries are never removed: forgetting one would let a recreated lease
// reissue old tokens.
type EpochStore struct {
	// Reader reads the ConfigMaps directly from the API server (not from a
	// cache, which could be stale and would watch every ConfigMap in the
	// cluster).
	Reader client.Reader
	// Writer creates and updates the shards.
	Writer client.Client
}

// EpochShardBudget is the most data a shard holds; with the object's metadata
// (a few hundred bytes, managedFields included) every shard stays under 512 KiB.
const EpochShardBudget = 448 << 10

// maxPlainKey is the longest lease name stored under its own name.
const maxPlainKey = 63

// ErrEpochShardFull is returned when recording a new name would take its
// shard past EpochShardBudget.
var ErrEpochShardFull = errors.New("epoch store shard is full")

// EpochKey is leaseName's key in its shard: the name when it has at most 63
// characters, otherwise "_" and 32 hex digits of its SHA-256 (lease names
// never start with "_", so the two forms cannot meet). Two long names whose
// hashes collide share one entry, the larger of their tokens: tokens then
// jump higher, never lower, so I1 holds.
func EpochKey(leaseName string) string {
	if len(leaseName) <= maxPlainKey {
		return leaseName
	}
	sum := sha256.Sum256([]byte(leaseName))
	return "_" + hex.EncodeToString(sum[:16])
}

// Get returns the highest token recorded for the lease name, 0 if none.
func (s *EpochStore) Get(ctx context.Context, leaseNamespace, leaseName string) (int64, error) {
	shard := coordv1alpha1.EpochShardName(leaseName)
	var cm corev1.ConfigMap
	err := s.Reader.Get(ctx, types.NamespacedName{Namespace: leaseNamespace, Name: shard}, &cm)
	switch {
	case apierrors.IsNotFound(err):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("reading epoch store %s/%s: %w", leaseNamespace, shard, err)
	}
	entries, err := EpochShardEntries(&cm)
	if err != nil {
		return 0, fmt.Errorf("epoch store %s/%s: %w", leaseNamespace, shard, err)
	}
	return entries[EpochKey(leaseName)], nil
}

// Record raises the stored token for the lease name to at least token. In a
// namespace that is being deleted, where no shard can be created, it records
// nothing and succeeds: the namespace's shards, leases and guarded objects
// are all going, and the lease's deletion must not block the namespace's.
func (s *EpochStore) Record(ctx context.Context, leaseNamespace, leaseName string, token int64) error {
	return s.recordShard(ctx, leaseNamespace, coordv1alpha1.EpochShardName(leaseName), map[string]int64{EpochKey(leaseName): token})
}

// RecordAll records many names of one namespace at once: one read and at
// most one write per shard, each as Record would do it.
func (s *EpochStore) RecordAll(ctx context.Context, leaseNamespace string, tokens map[string]int64) error {
	byShard := map[string]map[string]int64{}
	for name, token := range tokens {
		shard := coordv1alpha1.EpochShardName(name)
		if byShard[shard] == nil {
			byShard[shard] = map[string]int64{}
		}
		key := EpochKey(name)
		byShard[shard][key] = max(byShard[shard][key], token)
	}
	shards := make([]string, 0, len(byShard))
	for shard := range byShard {
		shards = append(shards, shard)
	}
	sort.Strings(shards)
	for _, shard := range shards {
		if err := s.recordShard(ctx, leaseNamespace, shard, byShard[shard]); err != nil {
			return err
		}
	}
	return nil
}

// shardBackoff spaces the retries of a conflicting shard write: many leases
// of one namespace deleted at once (a namespace deletion, a bulk clean-up)
// write their shards concurrently, and client-go's DefaultRetry (5 tries
// 10 ms apart) runs out under that contention.
var shardBackoff = wait.Backoff{Steps: 20, Duration: 5 * time.Millisecond, Factor: 1.5, Jitter: 0.5, Cap: time.Second}

// recordShard raises the entries of one shard, with an optimistic lock on
// every write (a conflict re-reads and merges again).
func (s *EpochStore) recordShard(ctx context.Context, ns, shard string, entries map[string]int64) error {
	return retry.RetryOnConflict(shardBackoff, func() error {
		var cm corev1.ConfigMap
		err := s.Reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: shard}, &cm)
		if apierrors.IsNotFound(err) {
			cm = corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: shard,
					Labels: map[string]string{
						"app.kubernetes.io/managed-by": "kubefence",
						coordv1alpha1.EpochStoreLabel:  "shard",
					}},
			}
			if _, err := merge(&cm, map[string]int64{}, entries); err != nil {
				return fmt.Errorf("epoch store %s/%s: %w", ns, shard, err)
			}
			if err := s.Writer.Create(ctx, &cm); err != nil {
				switch {
				case apierrors.IsAlreadyExists(err):
					return apierrors.NewConflict(corev1.Resource("configmaps"), shard, err)
				case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
					return nil
				}
				return fmt.Errorf("creating epoch store %s/%s: %w", ns, shard, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading epoch store %s/%s: %w", ns, shard, err)
		}
		current, err := EpochShardEntries(&cm)
		if err != nil {
			return fmt.Errorf("epoch store %s/%s: %w", ns, shard, err)
		}
		changed, err := merge(&cm, current, entries)
		if err != nil {
			return fmt.Errorf("epoch store %s/%s: %w", ns, shard, err)
		}
		if !changed {
			return nil
		}
		return s.Writer.Update(ctx, &cm)
	})
}

// merge raises current's entries to entries' tokens and, if anything
// changed, writes them into cm, refusing to take it past EpochShardBudget.
func merge(cm *corev1.ConfigMap, current, entries map[string]int64) (bool, error) {
	changed := false
	for key, token := range entries {
		if cur, had := current[key]; had && cur >= token {
			continue
		}
		current[key] = token
		changed = true
	}
	if !changed {
		return false, nil
	}
	blob := encodeEpochs(current)
	if len(blob) > EpochShardBudget {
		return false, fmt.Errorf("%w: %d entries would take it to %d bytes, past %d", ErrEpochShardFull, len(current), len(blob), EpochShardBudget)
	}
	cm.Data = map[string]string{coordv1alpha1.EpochDataKey: blob}
	return true, nil
}

// A shard's one data key, coordv1alpha1.EpochDataKey, holds one line per lease name,
// "<key> <token>", sorted by key. One key (rather than one per name) keeps
// the object's managedFields small: they list every data key, and would
// otherwise double the object's size.

func encodeEpochs(entries map[string]int64) string {
	keys := make([]string, 0, len(entries))
	for k := range entries {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(' ')
		b.WriteString(strconv.FormatInt(entries[k], 10))
		b.WriteByte('\n')
	}
	return b.String()
}

// EpochShardEntries parses a shard: key (EpochKey) to token.
func EpochShardEntries(cm *corev1.ConfigMap) (map[string]int64, error) {
	out := map[string]int64{}
	for line := range strings.Lines(cm.Data[coordv1alpha1.EpochDataKey]) {
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			continue
		}
		key, v, ok := strings.Cut(line, " ")
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil || n < 0 {
			return nil, fmt.Errorf("line %q: expected \"<lease name> <non-negative integer>\"", line)
		}
		out[key] = max(out[key], n)
	}
	return out, nil
}

// EpochShardBytes is the size of a shard's data, the quantity
// EpochShardBudget bounds.
func EpochShardBytes(cm *corev1.ConfigMap) int {
	n := 0
	for k, v := range cm.Data {
		n += len(k) + len(v)
	}
	return n
}
