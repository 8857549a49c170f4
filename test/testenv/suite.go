package testenv

import (
	"context"
	"io"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// Log sends controller-runtime's log (the operator's, the managers') to w,
// in development mode, as the suites log; io.Discard silences it.
func Log(w io.Writer) {
	logf.SetLogger(zap.New(zap.WriteTo(w), zap.UseDevMode(true)))
}

// Clients are a suite's lease clients: users of group, granted rules by the
// ClusterRole role (GrantClusterRole). It returns their clients and rest
// configs by name (Users).
func (c *Cluster) Clients(ctx context.Context, role, group string, rules []rbacv1.PolicyRule, names ...string) (map[string]client.WithWatch, map[string]*rest.Config, error) {
	if err := GrantClusterRole(ctx, c.Admin, role, group, rules...); err != nil {
		return nil, nil, err
	}
	return c.Users(group, names...)
}
