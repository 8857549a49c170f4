package certrotation

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/yaml"
)

// startInstalled starts a rotator with opts and waits until it is ready and
// has installed its certificates (checkInstalled).
func startInstalled(t *testing.T, f fixture, restCfg *rest.Config, opts Options) (*Rotator, artifacts) {
	t.Helper()
	r := startRotator(t, restCfg, opts)
	waitReady(t, r)
	return r, checkInstalled(t, f, r, opts.CertDir)
}

// checkInstalled checks the state a ready rotator promises: the Secret holds
// valid, current certificates, every caBundle is its ca.crt, the files in dir
// (when set) and GetCertificate are its serving certificate, and that
// certificate verifies against the caBundle for every DNS name.
func checkInstalled(t *testing.T, f fixture, r *Rotator, dir string) artifacts {
	t.Helper()
	a := getSecret(t, f)
	for key, v := range map[string][]byte{CACertKey: a.CACert, CAKeyKey: a.CAKey, CertKey: a.Cert, KeyKey: a.Key} {
		if len(v) == 0 {
			t.Fatalf("Secret key %s is empty", key)
		}
	}
	if _, why, err := renew(a, r.pol, r.opts.Clock.Now()); err != nil || why != reasonUpToDate {
		t.Fatalf("the Secret's certificates are not current: reason %q, err %v", why, err)
	}
	if err := bundleIs(t, f, a.CACert); err != nil {
		t.Fatal(err)
	}
	if dir != "" {
		for name, want := range map[string][]byte{"tls.crt": a.Cert, "tls.key": a.Key} {
			got, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s in CertDir is not the Secret's (err %v)", name, err)
			}
		}
	}
	served, err := r.GetCertificate(nil)
	if err != nil {
		t.Fatalf("GetCertificate: %v", err)
	}
	leaf := mustCerts(t, a.Cert)[0]
	if !bytes.Equal(served.Certificate[0], leaf.Raw) {
		t.Fatal("GetCertificate does not serve the Secret's certificate")
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caBundles(t, f)[0]) {
		t.Fatal("caBundle holds no certificate")
	}
	for _, name := range r.opts.DNSNames {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, CurrentTime: r.opts.Clock.Now(),
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Fatalf("serving certificate does not verify against the caBundle for %s: %v", name, err)
		}
	}
	return a
}

// seed stores a in f's Secret.
func seed(t *testing.T, f fixture, a artifacts) {
	t.Helper()
	s := &corev1.Secret{}
	if err := k8sClient.Get(t.Context(), f.secretKey(), s); err != nil {
		t.Fatal(err)
	}
	s.Data = a.intoData(s.Data)
	if err := k8sClient.Update(t.Context(), s); err != nil {
		t.Fatalf("seeding the Secret: %v", err)
	}
}

func fixturePolicy(f fixture) policy {
	return policyOf(f.options("").withDefaults())
}

// (1) From the Secret and webhook configuration as config/ ships them.
func TestBootstrapFromEmptySecret(t *testing.T) {
	f := newFixture(t, true)
	dir := filepath.Join(t.TempDir(), "serving-certs")
	_, a := startInstalled(t, f, cluster.Config, f.options(dir))
	if n := len(mustCerts(t, a.CACert)); n != 1 {
		t.Fatalf("ca.crt holds %d certificates, want 1", n)
	}
	s := &corev1.Secret{}
	if err := k8sClient.Get(t.Context(), f.secretKey(), s); err != nil {
		t.Fatal(err)
	}
	if s.Type != corev1.SecretTypeOpaque {
		t.Fatalf("Secret type changed to %s", s.Type)
	}
}

// The Secret is created when it is missing.
func TestCreatesMissingSecret(t *testing.T) {
	f := newFixture(t, false)
	startInstalled(t, f, cluster.Config, f.options(""))
}

// Changes are seen through the watches, long before RecheckInterval (1h).
func TestReactsToChanges(t *testing.T) {
	f := newFixture(t, true)
	dir := t.TempDir()
	r, before := startInstalled(t, f, cluster.Config, f.options(dir))
	ctx := t.Context()

	t.Run("caBundle reset by a re-apply of the manifests", func(t *testing.T) {
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: f.webhookConfig}, vwc); err != nil {
			t.Fatal(err)
		}
		for i := range vwc.Webhooks {
			vwc.Webhooks[i].ClientConfig.CABundle = nil
		}
		if err := k8sClient.Update(ctx, vwc); err != nil {
			t.Fatal(err)
		}
		eventually(t, "caBundle restored", func() error { return bundleIs(t, f, before.CACert) })
	})

	t.Run("serving certificate corrupted", func(t *testing.T) {
		broken := before
		broken.Cert = []byte("garbage")
		seed(t, f, broken)
		eventually(t, "serving certificate reissued", func() error {
			a := getSecret(t, f)
			if _, why, _ := renew(a, r.pol, time.Now()); why != reasonUpToDate {
				return fmt.Errorf("Secret not repaired yet (%s)", why)
			}
			if !bytes.Equal(a.CACert, before.CACert) {
				return errors.New("the CA was replaced, but it was valid")
			}
			return nil
		})
		eventually(t, "files and GetCertificate follow", func() error {
			a := getSecret(t, f)
			got, _ := os.ReadFile(filepath.Join(dir, "tls.crt"))
			served, _ := r.GetCertificate(nil)
			if !bytes.Equal(got, a.Cert) || served == nil || !bytes.Equal(served.Certificate[0], mustCerts(t, a.Cert)[0].Raw) {
				return errors.New("not yet")
			}
			return nil
		})
	})

	t.Run("Secret deleted", func(t *testing.T) {
		if err := k8sClient.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: f.secret}}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "Secret recreated and its CA injected", func() error {
			s := &corev1.Secret{}
			if err := k8sClient.Get(ctx, f.secretKey(), s); err != nil {
				return err
			}
			return bundleIs(t, f, s.Data[CACertKey])
		})
		checkInstalled(t, f, r, dir)
	})
}

// (2) Replicas that start together converge on one CA, and only one of them
// issues it.
func TestTwoRotatorsConvergeOnOneCA(t *testing.T) {
	for round := range 3 {
		t.Run(strconv.Itoa(round), func(t *testing.T) {
			f := newFixture(t, true)
			dirs := []string{t.TempDir(), t.TempDir()}
			rs := []*Rotator{startRotator(t, cluster.Config, f.options(dirs[0])), startRotator(t, cluster.Config, f.options(dirs[1]))}
			for _, r := range rs {
				waitReady(t, r)
			}
			a := getSecret(t, f)
			for i, r := range rs {
				if got := checkInstalled(t, f, r, dirs[i]); !got.equal(a) {
					t.Fatalf("replica %d: the Secret changed under the test", i)
				}
			}
			if n := len(mustCerts(t, a.CACert)); n != 1 {
				t.Fatalf("ca.crt holds %d CAs, want 1", n)
			}
			issued := func() (int, error) {
				list := &eventsv1.EventList{}
				if err := k8sClient.List(t.Context(), list, client.InNamespace(f.ns)); err != nil {
					return 0, err
				}
				n := 0
				for _, e := range list.Items {
					if e.Reason == EventCertificateIssued {
						n++
					}
				}
				return n, nil
			}
			eventually(t, "the CertificateIssued event is recorded", func() error {
				if n, err := issued(); err != nil || n == 0 {
					return fmt.Errorf("%d events (err %v)", n, err)
				}
				return nil
			})
			time.Sleep(time.Second) // the loser's event, if any, would be in by now
			if n, _ := issued(); n != 1 {
				t.Fatalf("%d CertificateIssued events, want 1: both replicas issued", n)
			}
		})
	}
}

// (3) Certificates that are due are rotated: on start, and on the timer.
func TestRotatesExpiringCertificate(t *testing.T) {
	t.Run("serving certificate due: the CA is kept", func(t *testing.T) {
		f := newFixture(t, true)
		old := mustIssue(t, fixturePolicy(f), time.Now().Add(-300*day)) // 65 days left
		seed(t, f, old)
		dir := t.TempDir()
		opts := f.options(dir)
		var served atomic.Pointer[time.Time]
		opts.OnServing = func(notAfter time.Time) { served.Store(&notAfter) }
		_, a := startInstalled(t, f, cluster.Config, opts)
		if !bytes.Equal(a.CACert, old.CACert) || !bytes.Equal(a.CAKey, old.CAKey) {
			t.Fatal("the CA was replaced, but it was not due")
		}
		got := mustCerts(t, a.Cert)[0].NotAfter
		if got.Before(time.Now().Add(364 * day)) {
			t.Fatalf("new serving certificate expires %s, want a year from now", got)
		}
		if exp := served.Load(); exp == nil || !exp.Equal(got) {
			t.Fatalf("OnServing was given %v, want the served certificate's notAfter %s", exp, got)
		}
	})

	t.Run("CA due: the old CA stays trusted", func(t *testing.T) {
		f := newFixture(t, true)
		old := mustIssue(t, fixturePolicy(f), time.Now().Add(-DefaultCAValidity+60*day)) // CA: 60 days left
		oldCA := mustCerts(t, old.CACert)[0]
		seed(t, f, old)
		r, a := startInstalled(t, f, cluster.Config, f.options(""))
		bundle := mustCerts(t, a.CACert)
		if len(bundle) != 2 || bytes.Equal(bundle[0].Raw, oldCA.Raw) || !bytes.Equal(bundle[1].Raw, oldCA.Raw) {
			t.Fatal("ca.crt is not [new CA, old CA]")
		}
		// A replica still serving a certificate of the old CA stays trusted.
		oldLeaf, _ := mustServing(t, fixturePolicy(f), oldCA, old.CAKey, time.Now().Add(-day))
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(caBundles(t, f)[1])
		if _, err := mustCerts(t, oldLeaf)[0].Verify(x509.VerifyOptions{DNSName: r.opts.DNSNames[0], Roots: roots}); err != nil {
			t.Fatalf("a serving certificate of the old CA is not trusted by the caBundle: %v", err)
		}
	})

	t.Run("on the timer (fake clock)", func(t *testing.T) {
		f := newFixture(t, true)
		fake := testingclock.NewFakeClock(time.Now())
		opts := f.options(t.TempDir())
		opts.Clock, opts.CAValidity, opts.CertValidity = fake, 10*time.Hour, time.Hour
		r, first := startInstalled(t, f, cluster.Config, opts)

		// The serving certificate (1h+6m lifetime) is due 16.5 minutes before
		// it expires: stepping past that fires the rotator's timer. Steps
		// continue while polling, so a timer armed just before a step fires too.
		step := func(d time.Duration) {
			for fake.HasWaiters() == false {
				time.Sleep(10 * time.Millisecond)
			}
			fake.Step(d)
		}
		step(50 * time.Minute)
		eventually(t, "serving certificate rotated", func() error {
			a := getSecret(t, f)
			if bytes.Equal(a.Cert, first.Cert) {
				fake.Step(time.Minute)
				return errors.New("not yet")
			}
			if !bytes.Equal(a.CACert, first.CACert) {
				return errors.New("the CA was replaced, but it was not due")
			}
			return nil
		})
		eventually(t, "installed", func() error {
			served, _ := r.GetCertificate(nil)
			if !bytes.Equal(served.Certificate[0], mustCerts(t, getSecret(t, f).Cert)[0].Raw) {
				return errors.New("not yet")
			}
			return nil
		})
		checkInstalled(t, f, r, opts.CertDir)

		// The CA (10h+1h lifetime) is due 2h45m before it expires.
		step(7*time.Hour + 30*time.Minute)
		eventually(t, "CA rotated", func() error {
			a := getSecret(t, f)
			if bytes.Equal(a.CAKey, first.CAKey) {
				fake.Step(time.Minute)
				return errors.New("not yet")
			}
			if n := len(mustCerts(t, a.CACert)); n != 2 {
				return fmt.Errorf("ca.crt holds %d CAs, want the new and the old", n)
			}
			return bundleIs(t, f, a.CACert)
		})
	})
}

// (4) Whatever is wrong with the Secret, it is repaired; a valid CA is kept.
func TestRegeneratesCorruptedSecret(t *testing.T) {
	tests := []struct {
		name    string
		corrupt func(good, other artifacts) artifacts
		keepCA  bool
	}{
		{name: "garbage in every key", corrupt: func(artifacts, artifacts) artifacts {
			return artifacts{CACert: []byte("x"), CAKey: []byte("x"), Cert: []byte("x"), Key: []byte("x")}
		}},
		{name: "ca.key missing", corrupt: func(good, _ artifacts) artifacts { good.CAKey = nil; return good }},
		{name: "ca.key of another CA", corrupt: func(good, other artifacts) artifacts { good.CAKey = other.CAKey; return good }},
		{name: "tls.key of another certificate", keepCA: true,
			corrupt: func(good, other artifacts) artifacts { good.Key = other.Key; return good }},
		{name: "serving certificate of another CA", keepCA: true,
			corrupt: func(good, other artifacts) artifacts { good.Cert, good.Key = other.Cert, other.Key; return good }},
		{name: "serving certificate for another Service", keepCA: true, corrupt: func(good, _ artifacts) artifacts {
			pol := testPolicy()
			pol.dnsNames = ServiceDNSNames("other-service", "other-namespace")
			ca := mustCerts(t, good.CACert)[0]
			good.Cert, good.Key, _ = issueServing(ca, mustKey(t, good.CAKey), pol, time.Now())
			return good
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, true)
			good := mustIssue(t, fixturePolicy(f), time.Now())
			bad := tc.corrupt(good, mustIssue(t, fixturePolicy(f), time.Now()))
			seed(t, f, bad)
			dir := t.TempDir()
			_, a := startInstalled(t, f, cluster.Config, f.options(dir))
			if kept := bytes.Equal(a.CACert, good.CACert) && bytes.Equal(a.CAKey, good.CAKey); kept != tc.keepCA {
				t.Fatalf("CA kept = %v, want %v", kept, tc.keepCA)
			}
		})
	}
}

// (5) A controller-runtime webhook server serves the files, and a client that
// trusts the caBundle completes a TLS handshake for the Service's name.
func TestTLSHandshake(t *testing.T) {
	f := newFixture(t, true)
	dir := t.TempDir()
	r, a := startInstalled(t, f, cluster.Config, f.options(dir))
	serverName := r.opts.DNSNames[0]

	fromFiles := startWebhookServer(t, webhook.Options{CertDir: dir})
	fromMemory := startWebhookServer(t, webhook.Options{
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.GetCertificate = r.GetCertificate }},
	})

	for name, addr := range map[string]string{"CertDir": fromFiles, "GetCertificate": fromMemory} {
		t.Run(name, func(t *testing.T) {
			leaf, err := handshake(addr, caBundles(t, f)[0], serverName)
			if err != nil {
				t.Fatalf("handshake: %v", err)
			}
			if !bytes.Equal(leaf.Raw, mustCerts(t, a.Cert)[0].Raw) {
				t.Fatal("the server presented another certificate than the Secret's")
			}
			if _, err := handshake(addr, caBundles(t, f)[0], "wrong.example.com"); err == nil {
				t.Fatal("handshake for another name succeeded")
			}
			if _, err := handshake(addr, mustIssue(t, testPolicy(), time.Now()).CACert, serverName); err == nil {
				t.Fatal("handshake trusting another CA succeeded")
			}
			if err := httpsGet(addr, caBundles(t, f)[0], serverName); err != nil {
				t.Fatalf("HTTPS request: %v", err)
			}
		})
	}

	t.Run("after a CA rotation the servers present the new certificate", func(t *testing.T) {
		seed(t, f, artifacts{CACert: []byte("x"), CAKey: []byte("x"), Cert: []byte("x"), Key: []byte("x")})
		var next artifacts
		eventually(t, "new CA injected", func() error {
			next = getSecret(t, f)
			if bytes.Equal(next.CACert, a.CACert) || len(next.Cert) < 10 {
				return errors.New("not yet")
			}
			return bundleIs(t, f, next.CACert)
		})
		for name, addr := range map[string]string{"CertDir": fromFiles, "GetCertificate": fromMemory} {
			eventually(t, name+" server presents the new certificate", func() error {
				leaf, err := handshake(addr, caBundles(t, f)[0], serverName)
				if err != nil {
					return err
				}
				if !bytes.Equal(leaf.Raw, mustCerts(t, next.Cert)[0].Raw) {
					return errors.New("old certificate")
				}
				return nil
			})
		}
	})
}

// startWebhookServer starts a webhook server on a free loopback port with a
// handler at /ok, and returns its address.
func startWebhookServer(t *testing.T, opts webhook.Options) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	opts.Host, opts.Port = "127.0.0.1", port
	srv := webhook.NewServer(opts)
	srv.Register("/ok", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("webhook server: %v", err)
		}
	})
	eventually(t, "webhook server started", func() error {
		select {
		case err := <-done:
			t.Fatalf("webhook server exited: %v", err)
		default:
		}
		return srv.StartedChecker()(nil)
	})
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

func clientTLS(caPEM []byte, serverName string) *tls.Config {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	return &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}
}

// handshake connects to addr trusting caPEM only, and returns the leaf the
// server presented.
func handshake(addr string, caPEM []byte, serverName string) (*x509.Certificate, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, clientTLS(caPEM, serverName))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

func httpsGet(addr string, caPEM []byte, serverName string) error {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: clientTLS(caPEM, serverName)}}
	resp, err := c.Get("https://" + addr + "/ok")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}

// The rotator works with no more than config/rbac/cert_rotation_role.yaml
// grants (the Secret exists, as config/ ships it), watches included.
func TestLeastPrivilege(t *testing.T) {
	f := newFixture(t, true)
	ctx := t.Context()
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "cert_rotation_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(data), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("cert_rotation_role.yaml: %d documents, want a Role and a ClusterRole", len(docs))
	}
	rename := func(rules []rbacv1.PolicyRule) {
		for i := range rules {
			for j, n := range rules[i].ResourceNames {
				switch n {
				case "webhook-server-cert":
					rules[i].ResourceNames[j] = f.secret
				case "validating-webhook-configuration":
					rules[i].ResourceNames[j] = f.webhookConfig
				case "fencing-webhook-configuration":
					// The second configuration the manager patches; unused here.
					rules[i].ResourceNames[j] = f.webhookConfig + "-fencing"
				default:
					t.Fatalf("cert_rotation_role.yaml names an unknown object %q", n)
				}
			}
		}
	}
	role, clusterRole := &rbacv1.Role{}, &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict([]byte(docs[0]), role); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), clusterRole); err != nil {
		t.Fatal(err)
	}
	user := "cert-rotator-" + f.ns
	role.ObjectMeta = metav1.ObjectMeta{Namespace: f.ns, Name: "cert-rotation-role"}
	clusterRole.ObjectMeta = metav1.ObjectMeta{Name: user}
	rename(role.Rules)
	rename(clusterRole.Rules)
	mustCreate(t, role)
	mustCreate(t, clusterRole)
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	mustCreate(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: role.Name}, Subjects: subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}})
	mustCreate(t, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user}, Subjects: subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole.Name}})
	t.Cleanup(func() {
		_ = k8sClient.Delete(context.Background(), &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user}})
		_ = k8sClient.Delete(context.Background(), &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}})
	})
	u, err := cluster.Env.AddUser(envtest.User{Name: user}, nil)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	_, before := startInstalled(t, f, u.Config(), f.options(dir))

	// The field-selected watch of the webhook configuration is allowed.
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Name: f.webhookConfig}, vwc); err != nil {
		t.Fatal(err)
	}
	vwc.Webhooks[0].ClientConfig.CABundle = nil
	if err := k8sClient.Update(ctx, vwc); err != nil {
		t.Fatal(err)
	}
	eventually(t, "caBundle restored through the watch", func() error { return bundleIs(t, f, before.CACert) })
}

// staleReader answers the first Get of a Secret with what a replica would
// have read before another one wrote: a copy of stale, or NotFound when nil.
type staleReader struct {
	client.Reader
	stale *corev1.Secret
	used  atomic.Bool
}

func (s *staleReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if secret, ok := obj.(*corev1.Secret); ok && s.used.CompareAndSwap(false, true) {
		if s.stale == nil {
			return apierrors.NewNotFound(corev1.Resource("secrets"), key.Name)
		}
		s.stale.DeepCopyInto(secret)
		return nil
	}
	return s.Reader.Get(ctx, key, obj, opts...)
}

// (2, deterministically) A replica that read the Secret before another one
// filled it loses its write, reads again and installs the winner's
// certificates instead of its own.
func TestLoserUsesWinnersCertificates(t *testing.T) {
	for _, tc := range []struct {
		name       string
		withSecret bool
	}{{"update conflicts", true}, {"create finds it exists", false}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.withSecret)
			var stale *corev1.Secret
			if tc.withSecret {
				stale = &corev1.Secret{}
				if err := k8sClient.Get(t.Context(), f.secretKey(), stale); err != nil {
					t.Fatal(err)
				}
			}
			winner := startRotator(t, cluster.Config, f.options(""))
			waitReady(t, winner)
			won := &corev1.Secret{}
			if err := k8sClient.Get(t.Context(), f.secretKey(), won); err != nil {
				t.Fatal(err)
			}

			dir := t.TempDir()
			loser, err := New(f.options(dir))
			if err != nil {
				t.Fatal(err)
			}
			reader := &staleReader{Reader: k8sClient, stale: stale}
			loser.reader, loser.writer = reader, k8sClient
			if _, err := loser.sync(t.Context()); err != nil {
				t.Fatalf("sync: %v", err)
			}
			if !reader.used.Load() {
				t.Fatal("the stale read was not used")
			}
			if loser.ReadyCheck(nil) != nil {
				t.Fatal("the loser is not ready")
			}
			after := &corev1.Secret{}
			if err := k8sClient.Get(t.Context(), f.secretKey(), after); err != nil {
				t.Fatal(err)
			}
			if after.ResourceVersion != won.ResourceVersion {
				t.Fatal("the loser wrote the Secret")
			}
			if got := checkInstalled(t, f, loser, dir); !got.equal(artifactsFromData(won.Data)) {
				t.Fatal("the loser installed other certificates than the winner's")
			}
		})
	}
}
