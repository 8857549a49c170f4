// Package certrotation issues and rotates the webhook server's own serving
// certificate: the built-in "self-signed" certificate mode, for clusters
// without cert-manager. It follows the cert-controller pattern of gatekeeper
// and kueue (open-policy-agent/cert-controller, kueue pkg/util/cert).
//
// A Rotator is a manager.Runnable that runs on every replica (it does not need
// leader election: each replica serves the webhook). On start and then
// whenever it is due, it
//
//  1. reads the Secret Options.SecretKey (uncached) and, when it is empty,
//     invalid, issued for other DNS names, or near expiry, generates a new
//     ECDSA P-256 CA and/or serving certificate and stores them in it as
//     ca.crt, ca.key, tls.crt and tls.key;
//  2. writes ca.crt into clientConfig.caBundle of every webhook of each
//     ValidatingWebhookConfiguration in Options.WebhookConfigurations (one
//     that does not exist is an error, retried: not ready until it exists);
//  3. writes tls.crt and tls.key into Options.CertDir (atomically: temporary
//     file and rename), and serves them from memory through GetCertificate;
//  4. closes Ready() and lets ReadyCheck pass, once 1-3 have all succeeded.
//
// It runs again when the Secret or a webhook configuration changes (it
// watches exactly those objects with its own informers, restricted by
// namespace and metadata.name field selectors, so the manager's cache is not
// involved), at least every Options.RecheckInterval, when the certificate
// becomes due, and after an error with exponential backoff.
//
// Guarantees:
//   - Replicas converge on one CA: every write of the Secret is an Update
//     carrying the resourceVersion that was read (or a Create when it is
//     missing), and a replica that loses the race re-reads the Secret and uses
//     what the winner wrote.
//   - A serving certificate is rotated when less than Options.RotateBefore
//     (default 90 days) or a quarter of its lifetime remains, whichever is
//     shorter; the CA likewise. A serving certificate never outlives its CA.
//   - A new serving certificate keeps the CA, so a caBundle that the
//     kube-apiserver already trusts stays valid. When the CA itself is
//     replaced, ca.crt (and so every caBundle) holds the new CA followed by
//     the previous one while it is unexpired, so replicas that still serve a
//     certificate of the old CA stay trusted until they catch up.
//   - Readiness is latched: once Ready is closed it stays closed, so a later
//     API server outage does not take the webhook endpoints out of service.
//
// Non-guarantees:
//   - It does not watch the certificate files: a file removed by someone else
//     is written again only at the next run.
//   - When CertDir is read-only (for example the Secret itself is mounted
//     there), it cannot write the files: it then waits until their content
//     equals the Secret's, as the kubelet syncs the volume, before it is ready.
//   - Replicas configured with different DNS names fight over the Secret, and
//     so may replicas whose clocks differ by more than the hour certificates
//     are backdated by.
//
// It is infrastructure of the operator's binary, not a controller of
// FencedLeases, and it imports no kubefence package: the operator passes its
// metric in (Options.OnServing). It must not import the reconciler, the
// webhooks, the assembly, pkg/fence, or any test or hack package.
package certrotation

// RBAC: config/rbac/cert_rotation_role.yaml grants exactly what the rotator
// needs, restricted by resourceNames to the certificate Secret and the two
// webhook configurations (controller-gen markers cannot name objects).
