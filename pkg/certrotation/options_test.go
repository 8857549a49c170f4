package certrotation

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

var defaultKey = types.NamespacedName{Namespace: "kubefence-system", Name: "kubefence-webhook-server-cert"}

func TestServiceDNSNames(t *testing.T) {
	got := ServiceDNSNames("kubefence-webhook-service", "kubefence-system")
	want := []string{"kubefence-webhook-service.kubefence-system.svc", "kubefence-webhook-service.kubefence-system.svc.cluster.local"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ServiceDNSNames = %v, want %v", got, want)
	}
}

func TestNewValidatesOptions(t *testing.T) {
	valid := func(mod func(*Options)) Options {
		o := Options{SecretKey: defaultKey, DNSNames: ServiceDNSNames("svc", "ns"),
			WebhookConfigurations: []string{"kubefence-validating-webhook-configuration"}}
		if mod != nil {
			mod(&o)
		}
		return o
	}
	tests := []struct {
		name    string
		opts    Options
		wantErr string // substring; empty: valid
	}{
		{name: "minimal", opts: valid(nil)},
		{name: "no webhook configurations", opts: valid(func(o *Options) { o.WebhookConfigurations = nil })},
		{name: "short CA validity defaults the serving certificate to it",
			opts: valid(func(o *Options) { o.CAValidity = time.Hour })},
		{name: "no secret", opts: valid(func(o *Options) { o.SecretKey = types.NamespacedName{} }), wantErr: "secretKey"},
		{name: "no secret namespace", opts: valid(func(o *Options) { o.SecretKey.Namespace = "" }), wantErr: "secretKey"},
		{name: "bad secret name", opts: valid(func(o *Options) { o.SecretKey.Name = "Bad_Name" }), wantErr: "secretKey"},
		{name: "no DNS names", opts: valid(func(o *Options) { o.DNSNames = nil }), wantErr: "dnsNames"},
		{name: "bad DNS name", opts: valid(func(o *Options) { o.DNSNames = []string{"svc..ns"} }), wantErr: "dnsNames"},
		{name: "bad webhook configuration name",
			opts: valid(func(o *Options) { o.WebhookConfigurations = []string{""} }), wantErr: "webhookConfigurations"},
		{name: "cert name with a slash", opts: valid(func(o *Options) { o.CertName = "../tls.crt" }), wantErr: "certName"},
		{name: "same cert and key name",
			opts: valid(func(o *Options) { o.CertDir, o.CertName, o.KeyName = "/tmp/x", "tls.pem", "tls.pem" }), wantErr: "must differ"},
		{name: "negative validity", opts: valid(func(o *Options) { o.CertValidity = -time.Hour }), wantErr: "certValidity"},
		{name: "negative recheck", opts: valid(func(o *Options) { o.RecheckInterval = -time.Hour }), wantErr: "recheckInterval"},
		{name: "serving certificate outlives CA",
			opts: valid(func(o *Options) { o.CAValidity, o.CertValidity = time.Hour, 2*time.Hour }), wantErr: "must not exceed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(tc.opts)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				if r.opts.CertValidity > r.opts.CAValidity || r.opts.Clock == nil || r.opts.CertName != "tls.crt" || r.opts.KeyName != "tls.key" {
					t.Fatalf("defaults not applied: %+v", r.opts)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("New: error %v, want one mentioning %q", err, tc.wantErr)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	r, err := New(Options{SecretKey: defaultKey, DNSNames: []string{"a.b.svc"}})
	if err != nil {
		t.Fatal(err)
	}
	o := r.opts
	if o.CAValidity != DefaultCAValidity || o.CertValidity != DefaultCertValidity || o.RotateBefore != DefaultRotateBefore ||
		o.RecheckInterval != DefaultRecheckInterval || o.CAName != DefaultCAName || o.CAOrganization != DefaultCAOrganization {
		t.Fatalf("defaults = %+v", o)
	}
	if r.NeedLeaderElection() {
		t.Fatal("NeedLeaderElection must be false")
	}
	if r.ReadyCheck(nil) == nil {
		t.Fatal("ReadyCheck passes before the rotator ran")
	}
	if _, err := r.GetCertificate(nil); err == nil {
		t.Fatal("GetCertificate returns a certificate before the rotator ran")
	}
	select {
	case <-r.Ready():
		t.Fatal("Ready is closed before the rotator ran")
	default:
	}
	if err := r.Start(t.Context()); err == nil || !strings.Contains(err.Error(), "SetupWithManager") {
		t.Fatalf("Start without SetupWithManager: %v", err)
	}
}

func TestWriteCertFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "serving-certs") // created on demand
	a := mustIssue(t, testPolicy(), t0)
	if err := writeCertFiles(dir, "tls.crt", "tls.key", a); err != nil {
		t.Fatalf("first write: %v", err)
	}
	check := func(name string, want []byte, perm os.FileMode) os.FileInfo {
		t.Helper()
		path := filepath.Join(dir, name)
		got, err := os.ReadFile(path)
		if err != nil || string(got) != string(want) {
			t.Fatalf("%s: content differs (err %v)", name, err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != perm {
			t.Fatalf("%s: mode %v, want %v", name, fi.Mode().Perm(), perm)
		}
		return fi
	}
	crt := check("tls.crt", a.Cert, 0o644)
	check("tls.key", a.Key, 0o600)

	// Same content: nothing is rewritten.
	if err := writeCertFiles(dir, "tls.crt", "tls.key", a); err != nil {
		t.Fatalf("second write: %v", err)
	}
	if again := check("tls.crt", a.Cert, 0o644); !os.SameFile(crt, again) {
		t.Fatal("identical content was rewritten")
	}

	// New content replaces the file (a new inode: rename, not truncate).
	b := mustIssue(t, testPolicy(), t0)
	if err := writeCertFiles(dir, "tls.crt", "tls.key", b); err != nil {
		t.Fatalf("third write: %v", err)
	}
	if replaced := check("tls.crt", b.Cert, 0o644); os.SameFile(crt, replaced) {
		t.Fatal("file was overwritten in place, not replaced")
	}
	check("tls.key", b.Key, 0o600)

	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Fatalf("directory holds %d entries, want tls.crt and tls.key only", len(entries))
	}

	// A file that cannot be written is an error.
	if err := writeFileAtomic(filepath.Join(dir, "missing-dir", "tls.crt"), a.Cert, 0o644); err == nil {
		t.Fatal("writing into a missing directory succeeded")
	}
}
