package testenv

import (
	"fmt"
	"net"
	"net/url"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// EtcdVia makes env's kube-apiserver reach etcd through the address (host:port)
// via returns for etcd's own, for instance a proxy's that delays chosen etcd
// requests (a commit held after admission); call it from Input.Configure. It
// fixes etcd's client address beforehand (a free loopback port), so that via
// knows where etcd will listen before it starts. With StartTwo the second
// server copies the first's flags, so it reaches etcd through the same
// address unless SecondEtcdVia is given too.
func EtcdVia(env *envtest.Environment, via func(etcd string) (string, error)) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("finding a port for etcd: %w", err)
	}
	etcd := l.Addr().String()
	_ = l.Close()
	addr, err := via(etcd)
	if err != nil {
		return fmt.Errorf("kube-apiserver's way to etcd: %w", err)
	}
	if env.ControlPlane.Etcd == nil {
		env.ControlPlane.Etcd = &envtest.Etcd{}
	}
	env.ControlPlane.Etcd.URL = &url.URL{Scheme: "http", Host: etcd}
	env.ControlPlane.GetAPIServer().Configure().Set("etcd-servers", (&url.URL{Scheme: "http", Host: addr}).String())
	return nil
}
