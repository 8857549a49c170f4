package certrotation

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// issueReason says why certificates were issued; see renew.
type issueReason string

// Reasons for issuing certificates (bounded, CamelCase: fit for logs, events
// and metric labels).
const (
	// reasonUpToDate: nothing was issued.
	reasonUpToDate issueReason = ""
	// reasonEmpty: the Secret held no certificates (or did not exist).
	reasonEmpty issueReason = "Empty"
	// reasonInvalid: the stored certificates could not be parsed, did not
	// match their keys, or the serving certificate did not verify against the
	// CA.
	reasonInvalid issueReason = "Invalid"
	// reasonCAExpiring: the CA is due for rotation.
	reasonCAExpiring issueReason = "CAExpiring"
	// reasonCertExpiring: the serving certificate is due for rotation.
	reasonCertExpiring issueReason = "CertExpiring"
	// reasonDNSNamesChanged: the serving certificate does not cover every
	// configured DNS name.
	reasonDNSNamesChanged issueReason = "DNSNamesChanged"
)

// artifacts are the PEM contents of the certificate Secret.
type artifacts struct {
	// CACert is the CA bundle: the signing CA first, optionally followed by
	// the previous CA. It is what goes into caBundle.
	CACert []byte
	// CAKey is the signing CA's private key.
	CAKey []byte
	// Cert is the serving certificate.
	Cert []byte
	// Key is the serving certificate's private key.
	Key []byte
}

// artifactsFromData reads the artifacts out of a Secret's data.
func artifactsFromData(data map[string][]byte) artifacts {
	return artifacts{CACert: data[CACertKey], CAKey: data[CAKeyKey], Cert: data[CertKey], Key: data[KeyKey]}
}

// intoData writes a into a Secret's data, keeping its other keys.
func (a artifacts) intoData(data map[string][]byte) map[string][]byte {
	if data == nil {
		data = map[string][]byte{}
	}
	data[CACertKey], data[CAKeyKey], data[CertKey], data[KeyKey] = a.CACert, a.CAKey, a.Cert, a.Key
	return data
}

func (a artifacts) empty() bool {
	return len(a.CACert) == 0 && len(a.CAKey) == 0 && len(a.Cert) == 0 && len(a.Key) == 0
}

func (a artifacts) equal(b artifacts) bool {
	return bytes.Equal(a.CACert, b.CACert) && bytes.Equal(a.CAKey, b.CAKey) &&
		bytes.Equal(a.Cert, b.Cert) && bytes.Equal(a.Key, b.Key)
}

// policy is what renew needs of Options.
type policy struct {
	dnsNames       []string
	caValidity     time.Duration
	certValidity   time.Duration
	rotateBefore   time.Duration
	caName         string
	caOrganization string
}

func policyOf(o Options) policy {
	return policy{
		dnsNames: o.DNSNames, caValidity: o.CAValidity, certValidity: o.CertValidity,
		rotateBefore: o.RotateBefore, caName: o.CAName, caOrganization: o.CAOrganization,
	}
}

// parsed is the CA of a stored set of artifacts that passed parsing.
type parsed struct {
	ca    *x509.Certificate // the signing CA: first in the bundle
	caKey crypto.Signer     // its key
}

// parseCA parses the CA bundle and key; the key must belong to the first CA.
func parseCA(a artifacts) (*parsed, error) {
	certs, err := parseCertificates(a.CACert)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CACertKey, err)
	}
	ca := certs[0]
	if !ca.IsCA || !ca.BasicConstraintsValid || ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("%s: the first certificate is not a CA", CACertKey)
	}
	key, err := parsePrivateKey(a.CAKey)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CAKeyKey, err)
	}
	if !publicKeysEqual(ca.PublicKey, key.Public()) {
		return nil, fmt.Errorf("%s does not belong to the CA in %s", CAKeyKey, CACertKey)
	}
	return &parsed{ca: ca, caKey: key}, nil
}

// parseLeaf parses the serving certificate and checks that its key matches.
func parseLeaf(a artifacts) (*x509.Certificate, error) {
	pair, err := tls.X509KeyPair(a.Cert, a.Key)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", CertKey, KeyKey, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CertKey, err)
	}
	return leaf, nil
}

// verifyLeaf checks that leaf chains to ca for server authentication at now.
func verifyLeaf(leaf, ca *x509.Certificate, now time.Time) error {
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	_, err := leaf.Verify(x509.VerifyOptions{
		Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	return err
}

// coversAll reports whether leaf is valid for every name.
func coversAll(leaf *x509.Certificate, names []string) bool {
	for _, name := range names {
		if leaf.VerifyHostname(name) != nil {
			return false
		}
	}
	return true
}

// rotationThreshold is how long before expiry cert is due: rotateBefore, or
// a quarter of its lifetime when that is shorter (so that a short-lived
// certificate is not due from the moment it is issued).
func rotationThreshold(cert *x509.Certificate, rotateBefore time.Duration) time.Duration {
	return min(rotateBefore, cert.NotAfter.Sub(cert.NotBefore)/4)
}

// dueAt is when cert must be replaced.
func dueAt(cert *x509.Certificate, rotateBefore time.Duration) time.Time {
	return cert.NotAfter.Add(-rotationThreshold(cert, rotateBefore))
}

// nextDue is when the first of the CA and the serving certificate of a is
// due. a must have passed renew.
func nextDue(a artifacts, rotateBefore time.Duration) (time.Time, error) {
	p, err := parseCA(a)
	if err != nil {
		return time.Time{}, err
	}
	leaf, err := parseCertificates(a.Cert)
	if err != nil {
		return time.Time{}, err
	}
	due := dueAt(p.ca, rotateBefore)
	if d := dueAt(leaf[0], rotateBefore); d.Before(due) {
		due = d
	}
	return due, nil
}

// renew returns the artifacts to store: cur itself and reasonUpToDate when cur
// is valid for pol.dnsNames at now and neither certificate is due; otherwise
// new artifacts and the reason. A new serving certificate keeps a CA that is
// valid and not due; a new CA is followed in the bundle by the previous
// signing CA while that is unexpired.
func renew(cur artifacts, pol policy, now time.Time) (artifacts, issueReason, error) {
	reason := reasonUpToDate
	p, err := parseCA(cur)
	switch {
	case cur.empty():
		reason = reasonEmpty
	case err != nil, now.Before(p.ca.NotBefore):
		// A CA from the future (a clock more than the backdate ahead) would
		// fail every verification here, so it is replaced rather than kept.
		reason = reasonInvalid
	case !now.Before(dueAt(p.ca, pol.rotateBefore)):
		reason = reasonCAExpiring
	}
	if reason != reasonUpToDate {
		var previous *x509.Certificate
		if p != nil && now.Before(p.ca.NotAfter) {
			previous = p.ca
		}
		next, err := issueAll(pol, now, previous)
		return next, reason, err
	}

	leaf, err := parseLeaf(cur)
	switch {
	case err != nil:
		reason = reasonInvalid
	case !now.Before(dueAt(leaf, pol.rotateBefore)):
		reason = reasonCertExpiring
	case verifyLeaf(leaf, p.ca, now) != nil:
		reason = reasonInvalid
	case !coversAll(leaf, pol.dnsNames):
		reason = reasonDNSNamesChanged
	default:
		return cur, reasonUpToDate, nil
	}
	certPEM, keyPEM, err := issueServing(p.ca, p.caKey, pol, now)
	if err != nil {
		return artifacts{}, reason, err
	}
	return artifacts{CACert: cur.CACert, CAKey: cur.CAKey, Cert: certPEM, Key: keyPEM}, reason, nil
}

// issueAll generates a CA and a serving certificate signed by it. previous,
// when set, is kept in the bundle after the new CA.
func issueAll(pol policy, now time.Time, previous *x509.Certificate) (artifacts, error) {
	caPEM, caKeyPEM, ca, caKey, err := generateCA(pol, now)
	if err != nil {
		return artifacts{}, err
	}
	certPEM, keyPEM, err := issueServing(ca, caKey, pol, now)
	if err != nil {
		return artifacts{}, err
	}
	if previous != nil {
		caPEM = append(caPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: previous.Raw})...)
	}
	return artifacts{CACert: caPEM, CAKey: caKeyPEM, Cert: certPEM, Key: keyPEM}, nil
}

// backdate is how far before now a certificate becomes valid, so that a
// replica whose clock is a little behind accepts it: an hour, or a tenth of
// the lifetime when that is shorter.
func backdate(validity time.Duration) time.Duration {
	return min(time.Hour, validity/10)
}

// generateCA creates a self-signed CA valid for pol.caValidity from now.
func generateCA(pol policy, now time.Time) (certPEM, keyPEM []byte, ca *x509.Certificate, key crypto.Signer, err error) {
	key, keyPEM, err = newKey()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: pol.caName, Organization: []string{pol.caOrganization}},
		NotBefore:             now.Add(-backdate(pol.caValidity)),
		NotAfter:              now.Add(pol.caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("creating the CA certificate: %w", err)
	}
	ca, err = x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("parsing the new CA certificate: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, ca, key, nil
}

// issueServing creates a serving certificate for pol.dnsNames signed by ca,
// valid for pol.certValidity from now but never past the CA.
func issueServing(ca *x509.Certificate, caKey crypto.Signer, pol policy, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(pol.certValidity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	notBefore := now.Add(-backdate(notAfter.Sub(now)))
	if notBefore.Before(ca.NotBefore) {
		notBefore = ca.NotBefore
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: pol.dnsNames[0]},
		DNSNames:     pol.dnsNames,
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the serving certificate: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// newKey generates an ECDSA P-256 key and its PKCS #8 PEM.
func newKey() (crypto.Signer, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating a key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding a key: %w", err)
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// newSerial returns a random 128-bit serial number.
func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("generating a serial number: %w", err)
	}
	return serial, nil
}

// parseCertificates parses every CERTIFICATE block of data; there must be at
// least one and nothing but certificates.
func parseCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for rest := bytes.TrimSpace(data); len(rest) > 0; rest = bytes.TrimSpace(rest) {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("not PEM")
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("unexpected PEM block %q", block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		certs = append(certs, cert)
	}
	if len(certs) == 0 {
		return nil, errors.New("no certificate")
	}
	return certs, nil
}

// parsePrivateKey parses one PEM private key: PKCS #8, SEC 1 (EC) or PKCS #1
// (RSA), so that a Secret filled by other tools is accepted too.
func parsePrivateKey(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("not PEM")
	}
	var (
		key any
		err error
	)
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("unexpected PEM block %q", block.Type)
	}
	if err != nil {
		return nil, err
	}
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		return k, nil
	case *rsa.PrivateKey:
		return k, nil
	default:
		return nil, fmt.Errorf("unsupported key type %T", key)
	}
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	eq, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(b)
}
