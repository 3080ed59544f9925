package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probeResult is one probe's verdict, with the reason for a failure.
type probeResult struct {
	ok     bool
	reason string
}

// probeClient is shared by every HTTP probe: no keep-alive (each probe opens
// a new connection, as the kubelet's does), no proxy from the environment,
// redirects to the same host followed.
var probeClient = &http.Client{
	Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
	CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 || req.URL.Host != via[0].URL.Host {
			return http.ErrUseLastResponse
		}
		return nil
	},
}

// runProbe runs one probe of a container against the Pod's address, as the
// kubelet does: HTTP GET succeeds on a status from 200 to 399, TCP on an
// accepted connection. Exec and gRPC probes cannot run here (the images are
// single programs, not file systems with a shell): they fail, saying so.
//
// It is given up after the probe's timeoutSeconds, or at ctx's deadline
// when that is later (a preStop hook may use the whole grace period).
func runProbe(ctx context.Context, probe *corev1.Probe, podIP string, container *corev1.Container) probeResult {
	timeout := time.Duration(max(probe.TimeoutSeconds, 1)) * time.Second
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) > timeout {
		timeout = time.Until(deadline)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case probe.HTTPGet != nil:
		get := probe.HTTPGet
		port, err := resolvePort(get.Port, container)
		if err != nil {
			return probeResult{reason: err.Error()}
		}
		host := get.Host
		if host == "" {
			host = podIP
		}
		scheme := "http"
		if get.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		target := &url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(port))}
		path, err := url.Parse(get.Path)
		if err != nil {
			return probeResult{reason: fmt.Sprintf("bad probe path %q: %v", get.Path, err)}
		}
		target = target.ResolveReference(path)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
		if err != nil {
			return probeResult{reason: err.Error()}
		}
		req.Header.Set("User-Agent", "kube-probe/1.36")
		req.Header.Set("Accept", "*/*")
		for _, h := range get.HTTPHeaders {
			if http.CanonicalHeaderKey(h.Name) == "Host" {
				req.Host = h.Value
			} else {
				req.Header.Add(h.Name, h.Value)
			}
		}
		resp, err := probeClient.Do(req)
		if err != nil {
			return probeResult{reason: fmt.Sprintf("Get %q: %v", target, err)}
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 10<<10))
		_ = resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return probeResult{reason: fmt.Sprintf("HTTP probe failed with statuscode: %d", resp.StatusCode)}
		}
		return probeResult{ok: true}
	case probe.TCPSocket != nil:
		port, err := resolvePort(probe.TCPSocket.Port, container)
		if err != nil {
			return probeResult{reason: err.Error()}
		}
		host := probe.TCPSocket.Host
		if host == "" {
			host = podIP
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return probeResult{reason: err.Error()}
		}
		_ = conn.Close()
		return probeResult{ok: true}
	case probe.Exec != nil:
		return probeResult{reason: "exec probes cannot run on the pod runner"}
	case probe.GRPC != nil:
		return probeResult{reason: "gRPC probes cannot run on the pod runner"}
	}
	return probeResult{reason: "probe has no handler"}
}

// resolvePort turns a probe's port (a number, or the name of a container
// port) into a number.
func resolvePort(port intstr.IntOrString, container *corev1.Container) (int, error) {
	if port.Type == intstr.Int {
		return port.IntValue(), nil
	}
	for _, p := range container.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("container %q has no port named %q", container.Name, port.StrVal)
}
