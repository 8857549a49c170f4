package upgrade

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/hack/devenv"
)

const (
	operatorNamespace = "kubefence-system"
	holdersGroup      = "kubefence:upgrade-holders"
)

// proc is a child process (an operator replica or a holder; it dies with the
// test) with its stdout in the file out and its stderr in log.
type proc struct {
	*devenv.Proc
	out, log string
}

// startProc starts bin with its stdout in outPath and its stderr in
// outPath's ".log" sibling (the same file when outPath ends in ".log").
func startProc(name, bin, outPath string, args, env []string) (*proc, error) {
	logPath := strings.TrimSuffix(outPath, filepath.Ext(outPath)) + ".log"
	out, err := os.OpenFile(outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	errf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer errf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, errf
	p, err := devenv.StartProc(name, cmd)
	if err != nil {
		return nil, err
	}
	return &proc{Proc: p, out: outPath, log: logPath}, nil
}

// logContains tells whether the process has logged s.
func (p *proc) logContains(s string) bool {
	b, err := os.ReadFile(p.log)
	return err == nil && strings.Contains(string(b), s)
}

// startReplica runs one operator replica of bin as the envtest admin (the
// controller user), with leader election as deployed, serving the webhooks
// on port with envtest's certificate, and waits until it serves TLS.
func startReplica(ctx context.Context, env *envtest.Environment, name, bin, kubeconfig, adminUser, dir string, port int, extra ...string) (*proc, error) {
	args := append([]string{
		"--webhook-cert-path=" + env.WebhookInstallOptions.LocalServingCertDir,
		"--webhook-port=" + strconv.Itoa(port),
		"--controller-user=" + adminUser,
		"--namespace=" + operatorNamespace,
		"--metrics-bind-address=0",
		"--health-probe-bind-address=0",
	}, extra...)
	p, err := startProc(name, bin, filepath.Join(dir, name+".log"), args, []string{"KUBECONFIG=" + kubeconfig})
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // readiness probe only
		if err == nil {
			_ = conn.Close()
			return p, nil
		}
		if p.Exited() {
			return nil, fmt.Errorf("replica %s exited while starting; see %s", name, p.log)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.Stop(time.Second)
			return nil, fmt.Errorf("replica %s did not serve on %s within 60s: %v", name, addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// leading is what a replica logs once it leads and its controller runs.
const leading = "Starting workers"

// waitLeading waits until p leads.
func waitLeading(ctx context.Context, p *proc, within time.Duration) error {
	deadline := time.Now().Add(within)
	for !p.logContains(leading) {
		if p.Exited() {
			return fmt.Errorf("replica %s exited; see %s", p.Name, p.log)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("replica %s did not become the leader within %v; see %s", p.Name, within, p.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// holdersRBAC lets the holders' group use FencedLeases as config/rbac's
// editor role does, and write Widgets, so that only fencing refuses a write.
func holdersRBAC() []client.Object {
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "kubefence-upgrade-holder"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{coordv1alpha1.GroupVersion.Group}, Resources: []string{"fencedleases"},
				Verbs: []string{"get", "list", "watch", "update", "patch"}},
			{APIGroups: []string{"example.kubefence.io"}, Resources: []string{"widgets"},
				Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, Name: holdersGroup}},
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}
	return []client.Object{ns, role, binding}
}
