package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefence/kubefence/pkg/version"
)

// operatorLabels select the manager Deployment config/manager installs.
var operatorLabels = client.MatchingLabels{"app.kubernetes.io/name": "kubefence", "control-plane": "controller-manager"}

// versionInfo is what version prints with -o json|yaml.
type versionInfo struct {
	// ClientVersion is the plugin's version (pkg/version, stamped by make).
	ClientVersion string `json:"clientVersion"`
	// Client is the plugin's whole build information.
	Client            version.Info `json:"client"`
	KubernetesVersion string       `json:"kubernetesVersion,omitempty"`
	OperatorVersion   string       `json:"operatorVersion,omitempty"`
	// OperatorDeployment is namespace/name of the Deployment the operator
	// version was read from.
	OperatorDeployment string `json:"operatorDeployment,omitempty"`
}

type versionOptions struct {
	*rootOptions
	clientOnly bool
	output     objectOutputFlag
}

func newVersionCmd(root *rootOptions) *cobra.Command {
	o := &versionOptions{rootOptions: root}
	cmd := noArgsCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version, and the Kubernetes and operator versions",
		Long: `Print the plugin's version and, unless --client, the API server's Kubernetes
version and the operator's: the image of the manager container of the
Deployment labelled app.kubernetes.io/name=kubefence,control-plane=controller-manager
(in any namespace). The operator version is "unknown" when that Deployment
cannot be found or read.`,
	}, o.run)
	cmd.Flags().BoolVar(&o.clientOnly, "client", false, "Print the plugin's version only; do not contact the API server.")
	o.output.addFlag(cmd)
	return cmd
}

func (o *versionOptions) run(ctx context.Context) error {
	if err := o.output.validate(); err != nil {
		return err
	}
	build := version.Get()
	v := versionInfo{ClientVersion: build.Version, Client: build}
	text := !o.output.structured()
	if text {
		// The client's line comes first, as kubectl version's does, so that
		// it is printed even when no cluster answers.
		fmt.Fprintf(o.streams.Out, "Client Version: %s\n", v.Client)
	}
	if !o.clientOnly {
		c, err := o.clients()
		if err != nil {
			return err
		}
		sv, err := c.discovery.ServerVersion()
		if err != nil {
			return fmt.Errorf("reading the server's version: %w", err)
		}
		v.KubernetesVersion = sv.GitVersion
		v.OperatorVersion, v.OperatorDeployment = operatorVersion(ctx, c)
	}
	if !text {
		return o.output.print(o.streams.Out, v)
	}
	if !o.clientOnly {
		fmt.Fprintf(o.streams.Out, "Kubernetes Version: %s\n", v.KubernetesVersion)
		if v.OperatorDeployment != "" {
			fmt.Fprintf(o.streams.Out, "Operator Version: %s (deployment %s)\n", v.OperatorVersion, v.OperatorDeployment)
		} else {
			fmt.Fprintf(o.streams.Out, "Operator Version: %s\n", v.OperatorVersion)
		}
	}
	return nil
}

// operatorVersion is the image of the operator's manager container, and the
// Deployment it was found in; "unknown" (with why) when there is none.
func operatorVersion(ctx context.Context, c *clients) (string, string) {
	var list appsv1.DeploymentList
	if err := c.kube.List(ctx, &list, operatorLabels); err != nil {
		return fmt.Sprintf("unknown (cannot list deployments: %v)", err), ""
	}
	for _, d := range list.Items {
		for _, ctr := range d.Spec.Template.Spec.Containers {
			if ctr.Name == "manager" {
				return ctr.Image, d.Namespace + "/" + d.Name
			}
		}
	}
	return "unknown (no manager Deployment labelled app.kubernetes.io/name=kubefence found)", ""
}
