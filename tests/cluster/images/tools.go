//go:build tools

// Package images pins the modules whose main packages the pod runner runs as
// container images: `go build` of a package needs its module in go.mod.
package images

import _ "sigs.k8s.io/gateway-api/conformance/echo-basic"
