package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// fakeLogs finds logs by "namespace/pod/container".
type fakeLogs map[string]*containerLog

func (f fakeLogs) containerLog(namespace, pod, container string) (*containerLog, error) {
	if l := f[namespace+"/"+pod+"/"+container]; l != nil {
		return l, nil
	}
	return nil, &logLookupError{status: http.StatusNotFound, msg: fmt.Sprintf("pod %q does not exist", pod)}
}

// kubeletWorld is the endpoint with one container's log, and the apiserver's certificates.
func kubeletWorld(t *testing.T) (*kubeletServer, *kubeletCerts) {
	t.Helper()
	certs, err := makeKubeletCerts(t.TempDir(), net.IPv4(127, 0, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	logs := fakeLogs{"shop/web-1/echo": fixedLog(rec(1, "out", "Echoing back request made to /a to client"), rec(2, "err", "oops"))}
	server, err := startKubeletServer(certs, "127.0.0.1", logs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(server.close)
	return server, certs
}

// client is an HTTPS client that trusts the endpoint's CA and presents
// certFile/keyFile (none when empty).
func httpsClient(t *testing.T, certs *kubeletCerts, certFile, keyFile string) *http.Client {
	t.Helper()
	config := &tls.Config{RootCAs: certs.caPool}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		config.Certificates = []tls.Certificate{pair}
	}
	transport := &http.Transport{TLSClientConfig: config}
	t.Cleanup(transport.CloseIdleConnections)
	return &http.Client{Transport: transport}
}

func getPath(c *http.Client, server *kubeletServer, path string) (int, string, error) {
	resp, err := c.Get(fmt.Sprintf("https://127.0.0.1:%d%s", server.port(), path))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func TestKubeletEndpointServesContainerLogsToTheApiserver(t *testing.T) {
	server, certs := kubeletWorld(t)
	apiserver := httpsClient(t, certs, certs.clientCertFile, certs.clientKeyFile)
	cases := []struct {
		path   string
		status int
		body   string
	}{
		{"/containerLogs/shop/web-1/echo", 200, "Echoing back request made to /a to client\noops\n"},
		{"/containerLogs/shop/web-1/echo?sinceTime=2026-12-02T10:00:02Z&timestamps=true", 200, "2026-12-02T10:00:02Z oops\n"},
		{"/containerLogs/shop/web-1/echo?previous=true", 400, "previous terminated container \"echo\" in pod \"web-1\" not found\n"},
		{"/containerLogs/shop/web-1/echo?tailLines=x", 422, "invalid tailLines \"x\"\n"},
		{"/containerLogs/shop/web-2/echo", 404, "pod \"web-2\" does not exist\n"},
		{"/containerLogs/shop/web-1", 404, "404 page not found\n"},
		{"/stats/summary", 404, "404 page not found\n"},
	}
	for _, c := range cases {
		status, body, err := getPath(apiserver, server, c.path)
		if err != nil {
			t.Fatalf("%s: %v", c.path, err)
		}
		if status != c.status || body != c.body {
			t.Errorf("%s: got %d %q, want %d %q", c.path, status, body, c.status, c.body)
		}
	}
}

func TestKubeletEndpointRefusesClientsWithoutTheApiserversCertificate(t *testing.T) {
	server, certs := kubeletWorld(t)
	// Another CA's certificate of the same name, as anyone could make.
	other, err := makeKubeletCerts(t.TempDir(), net.IPv4(127, 0, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*http.Client{
		"no certificate":           httpsClient(t, certs, "", ""),
		"another CA's certificate": httpsClient(t, certs, other.clientCertFile, other.clientKeyFile),
	} {
		status, body, err := getPath(c, server, "/containerLogs/shop/web-1/echo")
		if err == nil {
			t.Errorf("%s: answered %d %q", name, status, body)
		} else if !strings.Contains(err.Error(), "certificate") {
			t.Errorf("%s: want a TLS certificate error, got %v", name, err)
		}
	}
}

func TestKubeletCertsMakeTheApiserverTrustTheEndpointAtTheNodesAddress(t *testing.T) {
	certs, err := makeKubeletCerts(t.TempDir(), net.IPv4(127, 0, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"--kubelet-client-certificate=" + certs.clientCertFile,
		"--kubelet-client-key=" + certs.clientKeyFile,
		"--kubelet-certificate-authority=" + certs.caFile,
		"--kubelet-preferred-address-types=InternalIP",
	}
	if got := certs.apiserverFlags(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("flags: got %v, want %v", got, want)
	}
	pool, err := loadPool(certs.caFile)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := x509.ParseCertificate(certs.serving.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := parsed.VerifyHostname("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if _, err := parsed.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("the serving certificate does not verify against the CA file: %v", err)
	}
}
