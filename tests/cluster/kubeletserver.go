package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// kubeletCerts are the certificates between the apiserver and the pod
// runner's kubelet endpoint, made afresh at every start from a CA of their
// own whose key is never written down: the apiserver verifies the endpoint's
// certificate against that CA (--kubelet-certificate-authority), and the
// endpoint accepts only a client certificate that CA issued to the apiserver
// (--kubelet-client-certificate). Nothing else on the machine holds one.
type kubeletCerts struct {
	caFile, clientCertFile, clientKeyFile string
	caPool                                *x509.CertPool
	serving                               tls.Certificate
}

// kubeletClientName is the common name of the apiserver's client certificate.
const kubeletClientName = "kube-apiserver-kubelet-client"

// makeKubeletCerts writes the CA's certificate and the apiserver's client
// certificate and key into dir; the serving certificate (for host, an IP
// address) stays in memory.
func makeKubeletCerts(dir string, host net.IP) (*kubeletCerts, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sluice-test-cluster kubelet CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	issue := func(serial int64, template *x509.Certificate) ([]byte, *ecdsa.PrivateKey, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		template.SerialNumber = big.NewInt(serial)
		template.NotBefore, template.NotAfter = now.Add(-time.Hour), now.Add(10*365*24*time.Hour)
		template.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, template, ca, &key.PublicKey, caKey)
		return der, key, err
	}
	serverDER, serverKey, err := issue(2, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "sluice-node kubelet"},
		IPAddresses: []net.IP{host},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return nil, err
	}
	clientDER, clientKey, err := issue(3, &x509.Certificate{
		Subject:     pkix.Name{CommonName: kubeletClientName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, err
	}
	clientKeyDER, err := x509.MarshalECPrivateKey(clientKey)
	if err != nil {
		return nil, err
	}
	c := &kubeletCerts{
		caFile:         filepath.Join(dir, "ca.crt"),
		clientCertFile: filepath.Join(dir, "apiserver-kubelet-client.crt"),
		clientKeyFile:  filepath.Join(dir, "apiserver-kubelet-client.key"),
		caPool:         x509.NewCertPool(),
		serving:        tls.Certificate{Certificate: [][]byte{serverDER}, PrivateKey: serverKey},
	}
	c.caPool.AddCert(ca)
	files := []struct {
		path, kind string
		der        []byte
		mode       os.FileMode
	}{
		{c.caFile, "CERTIFICATE", caDER, 0o644},
		{c.clientCertFile, "CERTIFICATE", clientDER, 0o644},
		{c.clientKeyFile, "EC PRIVATE KEY", clientKeyDER, 0o600},
	}
	for _, f := range files {
		data := pem.EncodeToMemory(&pem.Block{Type: f.kind, Bytes: f.der})
		if err := os.WriteFile(f.path, data, f.mode); err != nil {
			return nil, fmt.Errorf("write %s: %w", f.path, err)
		}
	}
	return c, nil
}

// apiserverFlags are the kube-apiserver flags that make it reach the pod
// runner's endpoint: at the Node's InternalIP (its default order asks for
// the Node's hostname first, which does not resolve), with these
// certificates.
func (c *kubeletCerts) apiserverFlags() []string {
	return []string{
		"--kubelet-client-certificate=" + c.clientCertFile,
		"--kubelet-client-key=" + c.clientKeyFile,
		"--kubelet-certificate-authority=" + c.caFile,
		"--kubelet-preferred-address-types=InternalIP",
	}
}

// kubeletServer is the part of the kubelet's HTTPS API the apiserver calls
// for `pods/log`:
//
//	GET /containerLogs/{namespace}/{pod}/{container}
//
// It listens on the Node's InternalIP (loopback) and answers only a client
// presenting the apiserver's certificate.
type kubeletServer struct {
	listener net.Listener
	server   *http.Server
}

// logSource finds a container's log; its errors carry the HTTP status to
// answer.
type logSource interface {
	containerLog(namespace, pod, container string) (*containerLog, error)
}

// logLookupError is a lookup failure with the status the kubelet answers.
type logLookupError struct {
	status int
	msg    string
}

func (e *logLookupError) Error() string { return e.msg }

func startKubeletServer(certs *kubeletCerts, host string, logs logSource) (*kubeletServer, error) {
	listener, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("listen for the kubelet endpoint: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", func(w http.ResponseWriter, r *http.Request) {
		serveContainerLogs(w, r, logs)
	})
	server := &http.Server{
		Handler: authenticated(mux),
		TLSConfig: &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{certs.serving},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    certs.caPool,
		},
		ReadHeaderTimeout: 10 * time.Second,
	}
	s := &kubeletServer{listener: listener, server: server}
	go func() { _ = server.ServeTLS(listener, "", "") }()
	return s, nil
}

// port is where the endpoint listens, for the Node's
// status.daemonEndpoints.kubeletEndpoint.
func (s *kubeletServer) port() int32 { return int32(s.listener.Addr().(*net.TCPAddr).Port) }

func (s *kubeletServer) close() {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.server.Shutdown(ctx); err != nil {
		_ = s.server.Close()
	}
}

// authenticated lets through only the apiserver's client certificate (the
// TLS handshake has already checked that the CA issued it).
func authenticated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 || r.TLS.PeerCertificates[0].Subject.CommonName != kubeletClientName {
			http.Error(w, "Forbidden", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// serveContainerLogs answers as the kubelet's getContainerLogs does
// (k8s.io/kubernetes/pkg/kubelet/server/server.go): 404 for an unknown Pod
// or container, 400 for a container that has not started or has no previous
// run, then the log as chunked text/plain, flushed as it goes.
func serveContainerLogs(w http.ResponseWriter, r *http.Request, logs logSource) {
	opts, err := parseLogOptions(r.URL.Query(), time.Now())
	if err != nil {
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
		return
	}
	ns, pod, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	log, err := logs.containerLog(ns, pod, container)
	if err != nil {
		status := http.StatusInternalServerError
		var lookup *logLookupError
		if errors.As(err, &lookup) {
			status = lookup.status
		}
		http.Error(w, err.Error(), status)
		return
	}
	if opts.previous {
		log.mu.Lock()
		none := log.previous == nil
		log.mu.Unlock()
		if none {
			http.Error(w, fmt.Sprintf("previous terminated container %q in pod %q not found", container, pod), http.StatusBadRequest)
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	_ = log.write(r.Context(), w, opts)
}
