// Package conformance runs the Gateway API conformance suite,
// sigs.k8s.io/gateway-api/conformance v1.6.3 unmodified, against Sluice
// (issue 21): the suite's own entry point, with the options in options.yaml
// (GatewayClass `sluice`, profile GATEWAY-HTTP, features inferred from the
// GatewayClass's status.supportedFeatures, the implementation named for the
// report). Flags given after `-args` override the file, as the suite's
// flags do.
//
// It needs, and does not make (a runner script is to):
//
//   - the test cluster (tests/cluster/) with its pod runner on: the suite's
//     base manifests run 23 Pods (echo-basic, with Secret volumes for the TLS
//     backends, and CoreDNS with its Corefile ConfigMap at /root), and the
//     suite waits for all of them to be Ready;
//   - the Gateway API CRDs, standard channel, of the same version, from this
//     module's own dependency:
//     `kubectl apply --server-side -f "$(go list -m -f '{{.Dir}}' sigs.k8s.io/gateway-api)/config/crd/standard"`
//     (client-side apply refuses the largest CRDs: their last-applied
//     annotation is too long);
//   - Sluice running against the cluster under the shipped RBAC, as the
//     controller of a GatewayClass `sluice` that it accepts and whose
//     status.supportedFeatures it writes;
//   - Gateways reachable where their status says: the suite sends requests
//     to status.addresses[0] at the listener's port (80, 443), so Sluice
//     listens on those ports of the address it publishes.
//
// Without KUBECONFIG the test is skipped. A run:
//
//	cd tests/conformance
//	KUBECONFIG=… go test -count=1 -timeout=60m ./... -args \
//	  --report-output="$PWD/../../docs/conformance/report.yaml"
package conformance_test

import (
	"os"
	"testing"

	"sigs.k8s.io/gateway-api/conformance"
	"sigs.k8s.io/gateway-api/conformance/utils/flags"
)

func TestGatewayAPIConformance(t *testing.T) {
	if os.Getenv("KUBECONFIG") == "" {
		t.Skip("KUBECONFIG is not set: the suite runs against the test cluster with Sluice running")
	}
	if *flags.ConformanceOptionsFile == "" {
		*flags.ConformanceOptionsFile = "options.yaml"
	}
	conformance.RunConformance(t)
}
