package v1alpha1

import (
	"fmt"
	"hash/fnv"
)

// Names the install (config/, dist/chart) and the operator must agree on,
// and names a later version must still read. Each is declared here, once;
// test/install's TestNamesMatchTheManifests compares them with config/ and
// the chart, so a rename in one place fails the unit tier. The wire
// contract with clients is in wire.go. Changing one is a breaking change
// (docs/versioning.md).

// What config/default and the Helm chart install, by name.
const (
	// OperatorNamespace is the namespace config/default installs into (the
	// default of --namespace, after $POD_NAMESPACE).
	OperatorNamespace = "kubefence-system"
	// OperatorServiceAccount is the operator's service account (the default
	// of --service-account, after $POD_SERVICE_ACCOUNT).
	OperatorServiceAccount = "kubefence-controller-manager"
	// LeaderElectionID is the name of the operator's leader-election Lease
	// (coordination.k8s.io, in its namespace); the fencing webhook samples
	// its renewals for the clock-offset gauge, the alert
	// KubefenceNoControllerLeader selects it, and RBAC names it.
	LeaderElectionID = "controller.coordination.kubefence.io"
	// WebhookServiceName is the Service in front of the webhook server
	// (self-signed mode: the certificate's DNS names).
	WebhookServiceName = "kubefence-webhook-service"
	// WebhookSecretName is the Secret holding the webhook certificate (and,
	// self-signed, its CA).
	WebhookSecretName = "kubefence-webhook-server-cert"
	// LeaseWebhookConfigurationName is the ValidatingWebhookConfiguration of
	// the FencedLease webhook; FencingWebhookConfigurationName that of the
	// fencing webhooks. In self-signed mode the operator keeps their
	// caBundle current.
	LeaseWebhookConfigurationName   = "kubefence-validating-webhook-configuration"
	FencingWebhookConfigurationName = "kubefence-fencing-webhook-configuration"
	// TokenHistoryLabel, "true", marks what holds token history (the CRD):
	// `make undeploy` keeps it unless KEEP_HISTORY=false.
	TokenHistoryLabel = "kubefence.io/token-history"
)

// The paths the API server calls on the webhook server.
const (
	// FencedLeaseWebhookPath is the FencedLease validator's path (the one
	// controller-runtime derives from the GroupVersionKind).
	FencedLeaseWebhookPath = "/validate-coordination-kubefence-io-v1alpha1-fencedlease"
	// FencingGuardedPath serves writes to guarded objects (any kind labelled
	// GuardLeaseLabel).
	FencingGuardedPath = "/fence-guarded"
	// FencingRequiredPath serves the required kinds in namespaces labelled
	// FencingNamespaceLabel=required.
	FencingRequiredPath = "/fence-required"
	// FencingScalePath serves /scale of the listed kinds and pods/eviction.
	FencingScalePath = "/fence-scale"
	// FencingPodScopePath refuses guarded pods in namespaces the eviction
	// entry does not see (the pod-scope entry of config/webhook/fencing.yaml).
	FencingPodScopePath = "/fence-pod-scope"
)

// The epoch store: per lease name, the highest token ever issued, in
// EpochShards ConfigMaps in the lease's own namespace. A later version must
// read what an earlier one wrote: none of these can change.
const (
	// EpochShardPrefix names the shards: "<prefix>-00" to "<prefix>-3f".
	EpochShardPrefix = "kubefence-epochs"
	// EpochShards is the number of shards per namespace; a lease name's
	// shard is fnv32a(name) mod EpochShards.
	EpochShards = 64
	// EpochDataKey is a shard's one data key: lines "<key> <token>".
	EpochDataKey = "epochs"
	// EpochStoreLabel marks the shards (value "shard").
	EpochStoreLabel = "coordination.kubefence.io/epoch-store"
)

// TenureTableName is policy mode's tenure table in each lease namespace: one
// ConfigMap mapping each lease name to its current tenure, which the fencing
// policy's bindings name (paramRef.name).
const TenureTableName = "kubefence-tenures"

// TenureTableKey is the tenure table's one data key holding the entries:
// one line "\n<lease name> <entry>" per lease, in one string, so that the API
// server's per-decision conversion of the table (a ConfigMap parameter) costs
// the same whatever the number of leases (docs/design.md, "Policy mode").
// The fencing policy trusts a table only when its data holds exactly this
// key and the incarnation key (controllers/policy).
const TenureTableKey = "tenures"

// EpochShardName is the name of the epoch store shard, in the lease's
// namespace, that holds leaseName's highest token.
func EpochShardName(leaseName string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(leaseName))
	return epochShard(h.Sum32() % EpochShards)
}

// EpochShardNames are the names of all EpochShards shards.
func EpochShardNames() []string {
	names := make([]string, EpochShards)
	for i := range names {
		names[i] = epochShard(uint32(i))
	}
	return names
}

func epochShard(i uint32) string { return fmt.Sprintf("%s-%02x", EpochShardPrefix, i) }

// RefusalReason says why an admission webhook refused a write: the message
// of a CauseFieldReason cause (fencing webhook), and the reason label of
// kubefence_guarded_writes_refused_total and
// kubefence_lease_writes_refused_total. New values may be added.
type RefusalReason string

// Why the fencing webhook refuses a guarded write.
const (
	RefusalStale       RefusalReason = "stale"       // lower than accepted or current
	RefusalNoHolder    RefusalReason = "no-holder"   // lease released or expired
	RefusalExpired     RefusalReason = "expired"     // tenure past its expiry
	RefusalNotIssued   RefusalReason = "not-issued"  // higher than any issued token
	RefusalMalformed   RefusalReason = "malformed"   // missing, non-numeric, negative, overflowing
	RefusalNoLease     RefusalReason = "no-lease"    // the named lease does not exist
	RefusalNotHolder   RefusalReason = "not-holder"  // tokenless write from someone other than the holder
	RefusalUnguarded   RefusalReason = "unguarded"   // fencing is required but the object is not guarded
	RefusalLeaseError  RefusalReason = "lease-error" // the lease could not be read (fail closed)
	RefusalSlow        RefusalReason = "slow"        // the decision took longer than half the commit lag, or ended too near the tenure's expiry
	RefusalUncheckable RefusalReason = "uncheckable" // a cluster-scoped object carries the guard: no FencedLease can check it
)

// Why the FencedLease webhook refuses a FencedLease write.
const (
	LeaseRefusalNamespace      RefusalReason = "namespace"       // a lease in the operator's namespace or kube-system
	LeaseRefusalStatus         RefusalReason = "status"          // status is the controller's
	LeaseRefusalRenewTime      RefusalReason = "renew-time"      // a request's renewTime ahead of the webhook's clock, or removed
	LeaseRefusalOwner          RefusalReason = "owner"           // ownerReferences changed by other than admins, controller, clean-up
	LeaseRefusalAnnotation     RefusalReason = "annotation"      // the expired or revoked annotation written by the wrong user
	LeaseRefusalForeignRequest RefusalReason = "foreign-request" // another user's request added, changed or removed
	LeaseRefusalSubresource    RefusalReason = "subresource"     // a subresource other than status
	LeaseRefusalFinalizer      RefusalReason = "finalizer"       // the epoch finalizer removed by other than the controller
	LeaseRefusalRequeuedHolder RefusalReason = "requeued-holder" // the holder's identity queued again before its tenure ended
	LeaseRefusalRevocation     RefusalReason = "revocation"      // the holder's request removed without the revoked annotation
	LeaseRefusalSettings       RefusalReason = "settings"        // a lease's settings changed by other than a lease admin
	LeaseRefusalDelete         RefusalReason = "delete"          // a held lease deleted by other than admins, controller, clean-up
)
