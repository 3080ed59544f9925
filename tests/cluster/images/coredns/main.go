// Command coredns is the image registry.k8s.io/coredns/coredns for the pod
// runner: CoreDNS v1.12.2 (the version the Gateway API conformance suite's
// base manifests name), built from its own sources with the plugins its
// Corefile there uses (forward, log, errors, whoami). CoreDNS's documented
// way to choose plugins at build time is to import them into coremain's
// program, as here; the released image imports all of them, which would
// pull the cloud providers' SDKs into this module for nothing.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/whoami"
)

func main() { coremain.Run() }
