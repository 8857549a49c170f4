package testenv

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// UserClient adds user to env (a client certificate the API server
// authenticates) and returns a client acting as it, with its rest config.
func UserClient(env *envtest.Environment, scheme *runtime.Scheme, user envtest.User) (client.WithWatch, *rest.Config, error) {
	u, err := env.AddUser(user, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("adding user %s: %w", user.Name, err)
	}
	c, err := client.NewWithWatch(u.Config(), client.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, fmt.Errorf("creating the client of user %s: %w", user.Name, err)
	}
	return c, u.Config(), nil
}

// Kubeconfig adds user to env and writes a kubeconfig file acting as it into
// dir; it returns the file's path.
func Kubeconfig(env *envtest.Environment, dir string, user envtest.User) (string, error) {
	u, err := env.AddUser(user, nil)
	if err != nil {
		return "", fmt.Errorf("adding user %s: %w", user.Name, err)
	}
	data, err := u.KubeConfig()
	if err != nil {
		return "", fmt.Errorf("the kubeconfig of user %s: %w", user.Name, err)
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", err
	}
	return path, nil
}
