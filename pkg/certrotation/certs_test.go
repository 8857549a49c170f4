package certrotation

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"
)

const day = 24 * time.Hour

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func testPolicy() policy {
	return policyOf(Options{
		SecretKey: defaultKey, DNSNames: ServiceDNSNames("webhook-service", "kubefence-system"),
	}.withDefaults())
}

func mustIssue(t *testing.T, pol policy, now time.Time) artifacts {
	t.Helper()
	a, err := issueAll(pol, now, nil)
	if err != nil {
		t.Fatalf("issueAll: %v", err)
	}
	return a
}

func mustCerts(t *testing.T, data []byte) []*x509.Certificate {
	t.Helper()
	certs, err := parseCertificates(data)
	if err != nil {
		t.Fatalf("parseCertificates: %v", err)
	}
	return certs
}

// toSEC1 re-encodes a PKCS #8 ECDSA key as "EC PRIVATE KEY".
func toSEC1(t *testing.T, keyPEM []byte) []byte {
	t.Helper()
	key, err := parsePrivateKey(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(key.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

func TestRenew(t *testing.T) {
	pol := testPolicy()
	fresh := mustIssue(t, pol, t0)
	other := mustIssue(t, pol, t0)
	otherNames := pol
	otherNames.dnsNames = ServiceDNSNames("renamed-service", "kubefence-system")
	freshCA := mustCerts(t, fresh.CACert)[0]
	freshLeaf := mustCerts(t, fresh.Cert)[0]

	with := func(mod func(a *artifacts)) artifacts {
		a := fresh
		mod(&a)
		return a
	}
	tests := []struct {
		name   string
		cur    artifacts
		pol    policy
		now    time.Time
		want   issueReason
		keepCA bool // the signing CA of the result is the current one
		bundle int  // number of CAs in the resulting ca.crt
	}{
		{name: "empty", cur: artifacts{}, now: t0, want: reasonEmpty, bundle: 1},
		{name: "fresh", cur: fresh, now: t0, want: reasonUpToDate, keepCA: true, bundle: 1},
		{name: "a day before the serving certificate is due", cur: fresh,
			now: freshLeaf.NotAfter.Add(-90*day - day), want: reasonUpToDate, keepCA: true, bundle: 1},
		{name: "serving certificate due", cur: fresh,
			now: freshLeaf.NotAfter.Add(-90 * day), want: reasonCertExpiring, keepCA: true, bundle: 1},
		{name: "serving certificate expired", cur: fresh,
			now: freshLeaf.NotAfter.Add(day), want: reasonCertExpiring, keepCA: true, bundle: 1},
		{name: "CA due: the previous CA stays in the bundle", cur: fresh,
			now: freshCA.NotAfter.Add(-89 * day), want: reasonCAExpiring, bundle: 2},
		{name: "CA expired: the previous CA is dropped", cur: fresh,
			now: freshCA.NotAfter.Add(day), want: reasonCAExpiring, bundle: 1},
		{name: "DNS names changed", cur: fresh, pol: otherNames, now: t0,
			want: reasonDNSNamesChanged, keepCA: true, bundle: 1},
		{name: "serving certificate not yet valid", cur: with(func(a *artifacts) {
			a.Cert, a.Key = mustServing(t, testPolicy(), freshCA, fresh.CAKey, t0.Add(2*time.Hour))
		}), now: t0, want: reasonInvalid, keepCA: true, bundle: 1},
		{name: "CA not yet valid", cur: fresh, now: freshCA.NotBefore.Add(-time.Minute),
			want: reasonInvalid, bundle: 2},
		{name: "garbage ca.crt", cur: with(func(a *artifacts) { a.CACert = []byte("garbage") }),
			now: t0, want: reasonInvalid, bundle: 1},
		{name: "ca.crt is not a CA", cur: with(func(a *artifacts) { a.CACert = fresh.Cert }),
			now: t0, want: reasonInvalid, bundle: 1},
		{name: "ca.key of another CA", cur: with(func(a *artifacts) { a.CAKey = other.CAKey }),
			now: t0, want: reasonInvalid, bundle: 1},
		{name: "ca.key missing", cur: with(func(a *artifacts) { a.CAKey = nil }),
			now: t0, want: reasonInvalid, bundle: 1},
		{name: "only tls.crt", cur: artifacts{Cert: fresh.Cert}, now: t0, want: reasonInvalid, bundle: 1},
		{name: "tls.key of another certificate", cur: with(func(a *artifacts) { a.Key = other.Key }),
			now: t0, want: reasonInvalid, keepCA: true, bundle: 1},
		{name: "tls.crt signed by another CA", cur: with(func(a *artifacts) { a.Cert, a.Key = other.Cert, other.Key }),
			now: t0, want: reasonInvalid, keepCA: true, bundle: 1},
		{name: "tls.key missing", cur: with(func(a *artifacts) { a.Key = nil }),
			now: t0, want: reasonInvalid, keepCA: true, bundle: 1},
		{name: "SEC 1 keys are accepted", cur: with(func(a *artifacts) { a.CAKey, a.Key = toSEC1(t, a.CAKey), toSEC1(t, a.Key) }),
			now: t0, want: reasonUpToDate, keepCA: true, bundle: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pol := tc.pol
			if pol.dnsNames == nil {
				pol = testPolicy()
			}
			next, got, err := renew(tc.cur, pol, tc.now)
			if err != nil {
				t.Fatalf("renew: %v", err)
			}
			if got != tc.want {
				t.Fatalf("reason = %q, want %q", got, tc.want)
			}
			if tc.want == reasonUpToDate && !next.equal(tc.cur) {
				t.Fatal("up to date, but the artifacts changed")
			}
			if tc.want != reasonUpToDate && bytes.Equal(next.Cert, tc.cur.Cert) {
				t.Fatal("renewed, but the serving certificate is the same")
			}

			// What renew returns is itself up to date: no rotation loop.
			if again, why, err := renew(next, pol, tc.now); err != nil || why != reasonUpToDate || !again.equal(next) {
				t.Fatalf("renewing the result: reason %q, err %v; want it up to date", why, err)
			}
			bundle := mustCerts(t, next.CACert)
			if len(bundle) != tc.bundle {
				t.Fatalf("ca.crt holds %d certificates, want %d", len(bundle), tc.bundle)
			}
			if kept := bytes.Equal(bundle[0].Raw, freshCA.Raw); kept != tc.keepCA {
				t.Fatalf("signing CA kept = %v, want %v", kept, tc.keepCA)
			}
			if tc.bundle == 2 && !bytes.Equal(bundle[1].Raw, freshCA.Raw) {
				t.Fatal("the second CA of the bundle is not the previous CA")
			}
			// The serving certificate verifies against the bundle for every name.
			roots := x509.NewCertPool()
			for _, c := range bundle {
				roots.AddCert(c)
			}
			leaf := mustCerts(t, next.Cert)[0]
			for _, name := range pol.dnsNames {
				if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, CurrentTime: tc.now,
					KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
					t.Fatalf("serving certificate does not verify for %s: %v", name, err)
				}
			}
		})
	}
}

// The previous CA in the bundle keeps the old serving certificate trusted
// while replicas catch up with a CA rotation.
func TestRenewCAOverlapTrustsOldServingCertificate(t *testing.T) {
	pol := testPolicy()
	old := mustIssue(t, pol, t0)
	ca := mustCerts(t, old.CACert)[0]
	now := ca.NotAfter.Add(-89 * day)
	// The old serving certificate as it would be after its last renewal.
	certPEM, _ := mustServing(t, pol, ca, old.CAKey, now.Add(-day))
	next, why, err := renew(old, pol, now)
	if err != nil || why != reasonCAExpiring {
		t.Fatalf("renew: reason %q, err %v", why, err)
	}
	roots := x509.NewCertPool()
	for _, c := range mustCerts(t, next.CACert) {
		roots.AddCert(c)
	}
	if _, err := mustCerts(t, certPEM)[0].Verify(x509.VerifyOptions{DNSName: pol.dnsNames[0], Roots: roots, CurrentTime: now}); err != nil {
		t.Fatalf("old serving certificate is not trusted by the new bundle: %v", err)
	}
}

func mustServing(t *testing.T, pol policy, ca *x509.Certificate, caKey []byte, now time.Time) (certPEM, keyPEM []byte) {
	t.Helper()
	certPEM, keyPEM, err := issueServing(ca, mustKey(t, caKey), pol, now)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM
}

func mustKey(t *testing.T, keyPEM []byte) *ecdsa.PrivateKey {
	t.Helper()
	key, err := parsePrivateKey(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return key.(*ecdsa.PrivateKey)
}

func TestIssuedCertificates(t *testing.T) {
	pol := testPolicy()
	a := mustIssue(t, pol, t0)
	ca, leaf := mustCerts(t, a.CACert)[0], mustCerts(t, a.Cert)[0]

	checks := []struct {
		name string
		ok   bool
	}{
		{"CA is a CA that may only sign leaves", ca.IsCA && ca.BasicConstraintsValid && ca.MaxPathLenZero && ca.KeyUsage&x509.KeyUsageCertSign != 0},
		{"CA names", ca.Subject.CommonName == DefaultCAName && len(ca.Subject.Organization) == 1 && ca.Subject.Organization[0] == DefaultCAOrganization},
		{"CA lives 10 years", ca.NotAfter.Equal(t0.Add(DefaultCAValidity))},
		{"CA is backdated an hour", ca.NotBefore.Equal(t0.Add(-time.Hour))},
		{"leaf is not a CA", !leaf.IsCA},
		{"leaf is for server auth only", len(leaf.ExtKeyUsage) == 1 && leaf.ExtKeyUsage[0] == x509.ExtKeyUsageServerAuth},
		{"leaf names", leaf.Subject.CommonName == pol.dnsNames[0] && len(leaf.DNSNames) == 2 && leaf.DNSNames[1] == "webhook-service.kubefence-system.svc.cluster.local"},
		{"leaf lives a year", leaf.NotAfter.Equal(t0.Add(DefaultCertValidity))},
		{"leaf is issued by the CA", bytes.Equal(leaf.AuthorityKeyId, ca.SubjectKeyId) && len(ca.SubjectKeyId) > 0},
		{"keys are ECDSA P-256", mustKey(t, a.CAKey).Curve == elliptic.P256() && mustKey(t, a.Key).Curve == elliptic.P256()},
		{"serials differ", ca.SerialNumber.Cmp(leaf.SerialNumber) != 0},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: no", c.name)
		}
	}

	// A serving certificate never outlives its CA.
	late := ca.NotAfter.Add(-100 * day)
	certPEM, _, err := issueServing(ca, mustKey(t, a.CAKey), pol, late)
	if err != nil {
		t.Fatal(err)
	}
	if got := mustCerts(t, certPEM)[0].NotAfter; !got.Equal(ca.NotAfter) {
		t.Errorf("serving certificate issued 100 days before the CA expires ends at %s, want the CA's %s", got, ca.NotAfter)
	}
}

func TestRotationThreshold(t *testing.T) {
	tests := []struct {
		lifetime, rotateBefore, want time.Duration
	}{
		{lifetime: 365*day + time.Hour, rotateBefore: 90 * day, want: 90 * day},
		{lifetime: 10 * 365 * day, rotateBefore: 90 * day, want: 90 * day},
		{lifetime: 100 * day, rotateBefore: 90 * day, want: 25 * day},
		{lifetime: time.Hour, rotateBefore: 90 * day, want: 15 * time.Minute},
		{lifetime: 365 * day, rotateBefore: time.Hour, want: time.Hour},
	}
	for _, tc := range tests {
		cert := &x509.Certificate{NotBefore: t0, NotAfter: t0.Add(tc.lifetime)}
		if got := rotationThreshold(cert, tc.rotateBefore); got != tc.want {
			t.Errorf("rotationThreshold(lifetime %s, rotateBefore %s) = %s, want %s", tc.lifetime, tc.rotateBefore, got, tc.want)
		}
		if got, want := dueAt(cert, tc.rotateBefore), cert.NotAfter.Add(-tc.want); !got.Equal(want) {
			t.Errorf("dueAt = %s, want %s", got, want)
		}
	}
}

// Whatever the validity, a certificate is not due when it is issued, and it
// is due before it expires.
func TestNoRotationLoop(t *testing.T) {
	for _, v := range []struct{ ca, cert time.Duration }{
		{time.Minute, time.Minute}, {time.Hour, 10 * time.Minute}, {10 * time.Hour, time.Hour},
		{DefaultCAValidity, DefaultCertValidity}, {DefaultCAValidity, DefaultCAValidity},
	} {
		pol := testPolicy()
		pol.caValidity, pol.certValidity = v.ca, v.cert
		a := mustIssue(t, pol, t0)
		if _, why, err := renew(a, pol, t0); err != nil || why != reasonUpToDate {
			t.Errorf("validity %s/%s: freshly issued certificates renew with reason %q, err %v", v.ca, v.cert, why, err)
		}
		due, err := nextDue(a, pol.rotateBefore)
		if err != nil {
			t.Fatal(err)
		}
		leaf := mustCerts(t, a.Cert)[0]
		if !due.After(t0) || !due.Before(leaf.NotAfter) {
			t.Errorf("validity %s/%s: due at %s, want within (%s, %s)", v.ca, v.cert, due, t0, leaf.NotAfter)
		}
	}
}

func TestParseCertificatesRejects(t *testing.T) {
	a := mustIssue(t, testPolicy(), t0)
	for name, data := range map[string][]byte{
		"empty":                {},
		"not PEM":              []byte("not pem"),
		"a key":                a.Key,
		"a certificate, a key": append(append([]byte{}, a.Cert...), a.Key...),
		"trailing garbage":     append(append([]byte{}, a.Cert...), "garbage"...),
		"broken DER":           pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2, 3}}),
	} {
		if _, err := parseCertificates(data); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}
