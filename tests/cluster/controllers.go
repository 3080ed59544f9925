package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	kcm "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
)

// workloadControllers are the kube-controller-manager controllers a workload
// needs (names as in k8s.io/kubernetes/cmd/kube-controller-manager/names,
// v1.36): Deployments make ReplicaSets, ReplicaSets make Pods, Services get
// EndpointSlices (and mirrored ones for hand-made Endpoints), deleted
// namespaces and owned objects are cleaned up, and every namespace gets its
// default ServiceAccount with a token. The root CA publisher gives each
// namespace its kube-root-ca.crt ConfigMap, which Pods' projected service
// account volumes refer to.
var workloadControllers = []string{
	"deployment-controller",
	"replicaset-controller",
	"endpointslice-controller",
	"endpointslice-mirroring-controller",
	"namespace-controller",
	"garbage-collector-controller",
	"serviceaccount-controller",
	"serviceaccount-token-controller",
	"root-ca-certificate-publisher-controller",
}

// startControllerManager runs the real kube-controller-manager in this
// process, with the controllers above. It does what the command's RunE does
// (options, flags, config, Run) except applying the logging configuration,
// which the apiserver in this process has applied already (a second apply is
// refused); its context never ends: it runs until the process exits. Its
// secure port is off; it talks to the apiserver with kubeconfig.
func startControllerManager(kubeconfig, saKeyFile, rootCAFile string) (<-chan error, error) {
	s, err := options.NewKubeControllerManagerOptions()
	if err != nil {
		return nil, fmt.Errorf("kube-controller-manager options: %w", err)
	}
	named := s.Flags(kcm.KnownControllers(), kcm.ControllersDisabledByDefault(), kcm.ControllerAliases())
	s.ParsedFlags = &named
	fs := pflag.NewFlagSet("kube-controller-manager", pflag.ContinueOnError)
	for _, f := range named.FlagSets {
		fs.AddFlagSet(f)
	}
	err = fs.Parse([]string{
		"--kubeconfig=" + kubeconfig,
		"--controllers=" + strings.Join(workloadControllers, ","),
		"--leader-elect=false",
		"--secure-port=0",
		"--service-account-private-key-file=" + saKeyFile,
		"--root-ca-file=" + rootCAFile,
		"--use-service-account-credentials=false",
		// Quick to react: a test cluster has few objects.
		"--concurrent-deployment-syncs=5",
		"--concurrent-replicaset-syncs=5",
		"--concurrent-service-endpoint-syncs=5",
		"--kube-api-qps=200",
		"--kube-api-burst=400",
	})
	if err != nil {
		return nil, fmt.Errorf("kube-controller-manager flags: %w", err)
	}
	if err := s.ComponentGlobalsRegistry.Set(); err != nil {
		return nil, fmt.Errorf("kube-controller-manager feature gates: %w", err)
	}
	ctx := context.Background()
	c, err := s.Config(ctx, kcm.KnownControllers(), kcm.ControllersDisabledByDefault(), kcm.ControllerAliases())
	if err != nil {
		return nil, fmt.Errorf("kube-controller-manager config: %w", err)
	}
	done := make(chan error, 1)
	go func() {
		if err := kcm.Run(ctx, c.Complete()); err != nil {
			done <- fmt.Errorf("kube-controller-manager: %w", err)
			return
		}
		done <- fmt.Errorf("kube-controller-manager stopped")
	}()
	return done, nil
}
