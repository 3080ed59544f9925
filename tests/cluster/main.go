// Command cluster runs a real Kubernetes cluster for Sluice's tests, in one
// process, on loopback: an embedded etcd, the real kube-apiserver, the real
// kube-controller-manager (the controllers a workload needs), and a pod
// runner in place of a kubelet that runs Pods of known images as local
// processes in network namespaces of their own.
//
// It writes a kubeconfig (token auth, TLS verified against the apiserver's own
// certificate), prints one line naming it, and shuts down cleanly on SIGTERM,
// SIGINT, or when its standard input closes.
//
// Subcommands: `cluster kubectl …` is the matching kubectl; `cluster
// pod-exec …` is the pod runner's own step into a Pod's namespaces.
package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/embed"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "kubectl":
			kubectl(os.Args[2:])
			return
		case "pod-exec":
			if err := podExec(os.Args[2:]); err != nil {
				fmt.Fprintf(os.Stderr, "pod-exec: %v\n", err)
				os.Exit(127)
			}
			return
		}
	}
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "cluster: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("dir", "", "work directory (default: a new temporary directory, removed on exit)")
	kubeconfigOut := flag.String("kubeconfig", "", "where to write the kubeconfig (default: <dir>/kubeconfig)")
	port := flag.Int("port", 0, "apiserver secure port (default: a free port)")
	watchStdin := flag.Bool("watch-stdin", true, "shut down when standard input closes")
	readyTimeout := flag.Duration("ready-timeout", 3*time.Minute, "how long to wait for the apiserver to become ready")
	controllers := flag.Bool("controllers", true, "run kube-controller-manager (Deployments, ReplicaSets, EndpointSlices, namespaces, garbage collection, ServiceAccounts)")
	podRunnerMode := flag.String("pod-runner", "auto", "run Pods as local processes: auto (when root), on, off")
	nodeName := flag.String("node-name", "sluice-node", "the pod runner's Node")
	images := imageFlag{}
	flag.Var(images, "image", "an image the pod runner can run, as name=program (repeatable), e.g. traefik/whoami=/path/to/whoami")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: cluster [flags] [-- extra kube-apiserver flags]\n       cluster kubectl [kubectl arguments]\n")
		flag.PrintDefaults()
	}
	flag.Parse()

	workDir := *dir
	removeDir := false
	if workDir == "" {
		d, err := os.MkdirTemp("", "sluice-cluster-")
		if err != nil {
			return fmt.Errorf("create work directory: %w", err)
		}
		workDir, removeDir = d, true
	}
	if removeDir {
		defer os.RemoveAll(workDir)
	}
	if *kubeconfigOut == "" {
		*kubeconfigOut = filepath.Join(workDir, "kubeconfig")
	}

	// Our own handler only records that a stop was asked for; the apiserver
	// installs its own handler for the same signals and shuts itself down.
	stopSignals := make(chan os.Signal, 2)
	signal.Notify(stopSignals, syscall.SIGTERM, syscall.SIGINT)
	stopRequested := make(chan struct{})
	go func() {
		<-stopSignals
		close(stopRequested)
	}()

	etcdServer, etcdURL, err := startEtcd(filepath.Join(workDir, "etcd"))
	if err != nil {
		return err
	}
	defer func() {
		etcdServer.Close()
		<-etcdServer.Server.StopNotify()
	}()

	// A restart on an existing --dir keeps its data, certificates and
	// credentials, so clients configured for the first run keep working.
	tokenFile := filepath.Join(workDir, "tokens.csv")
	token, err := adminToken(tokenFile)
	if err != nil {
		return err
	}
	saKeyFile := filepath.Join(workDir, "sa.key")
	if _, err := os.Stat(saKeyFile); errors.Is(err, os.ErrNotExist) {
		if err := writeRSAKey(saKeyFile); err != nil {
			return err
		}
	}
	certDir := filepath.Join(workDir, "certs")
	if *port == 0 {
		if *port, err = freePort(); err != nil {
			return err
		}
	}

	// The apiserver reads Pods' logs from the pod runner's kubelet endpoint
	// on the Node's address (kubeletserver.go).
	kubeletCerts, err := makeKubeletCerts(filepath.Join(workDir, "kubelet-certs"), net.IPv4(127, 0, 0, 1))
	if err != nil {
		return fmt.Errorf("make the kubelet endpoint's certificates: %w", err)
	}

	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", *port),
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + certDir,
		"--authorization-mode=RBAC",
		"--token-auth-file=" + tokenFile,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + saKeyFile,
		"--service-account-signing-key-file=" + saKeyFile,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
	}
	args = append(args, kubeletCerts.apiserverFlags()...)
	args = append(args, flag.Args()...)

	cmd := app.NewAPIServerCommand()
	cmd.SetArgs(args)
	apiserverDone := make(chan error, 1)
	go func() { apiserverDone <- cmd.Execute() }()

	server := fmt.Sprintf("https://127.0.0.1:%d", *port)
	caFile := filepath.Join(certDir, "apiserver.crt")
	ctx, cancel := context.WithTimeout(context.Background(), *readyTimeout)
	defer cancel()
	if err := waitReady(ctx, server, caFile, token, apiserverDone, stopRequested); err != nil {
		stopSelf()
		waitApiserver(apiserverDone)
		return err
	}
	if err := writeKubeconfig(*kubeconfigOut, server, caFile, token); err != nil {
		stopSelf()
		waitApiserver(apiserverDone)
		return err
	}
	control, err := serveControl(etcdServer)
	if err != nil {
		stopSelf()
		waitApiserver(apiserverDone)
		return err
	}
	defer control.Close()

	restConfig := &rest.Config{Host: server, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: caFile}}
	var controllersDone <-chan error
	if *controllers {
		controllersDone, err = startControllerManager(*kubeconfigOut, saKeyFile, caFile)
		if err == nil {
			err = waitControllers(ctx, restConfig, controllersDone)
		}
		if err != nil {
			stopSelf()
			waitApiserver(apiserverDone)
			return err
		}
	}
	pods := "off"
	runnerCtx, stopRunner := context.WithCancel(context.Background())
	defer stopRunner()
	var runner *podRunner
	switch why := podRunnerUnavailable(*podRunnerMode); {
	case why != "" && *podRunnerMode == "on":
		stopSelf()
		waitApiserver(apiserverDone)
		return fmt.Errorf("pod runner: %s", why)
	case why != "":
		pods = "off (" + why + ")"
		fmt.Fprintf(os.Stderr, "pod runner: off: %s; Pods stay Pending\n", why)
	default:
		runner, err = startPodRunner(runnerCtx, restConfig, podRunnerOptions{
			node: *nodeName, images: images, podsDir: filepath.Join(workDir, "pods"),
			kubeletCerts: kubeletCerts,
		})
		if err != nil {
			stopSelf()
			waitApiserver(apiserverDone)
			return fmt.Errorf("start the pod runner: %w", err)
		}
		pods = "on"
		defer func() {
			stopRunner()
			runner.stop()
		}()
	}
	fmt.Printf("cluster ready: kubeconfig=%s server=%s control=http://%s pods=%s\n", *kubeconfigOut, server, control.Addr(), strings.ReplaceAll(pods, " ", "_"))

	if *watchStdin {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			stopSelf()
		}()
	}

	select {
	case err := <-apiserverDone:
		if err != nil {
			return fmt.Errorf("kube-apiserver stopped: %w", err)
		}
		return nil
	case err := <-controllersDone:
		stopSelf()
		waitApiserver(apiserverDone)
		return err
	case <-stopRequested:
		if runner != nil {
			stopRunner()
			runner.stop()
		}
		waitApiserver(apiserverDone)
		return nil
	}
}

// imageFlag collects --image name=program.
type imageFlag map[string]string

func (f imageFlag) String() string { return fmt.Sprint(map[string]string(f)) }

func (f imageFlag) Set(v string) error {
	name, program, ok := strings.Cut(v, "=")
	if !ok || name == "" || program == "" {
		return fmt.Errorf("want name=program, got %q", v)
	}
	abs, err := filepath.Abs(program)
	if err != nil {
		return err
	}
	if _, err := os.Stat(abs); err != nil {
		return fmt.Errorf("image %q: %w", name, err)
	}
	f[imageName(name)] = abs
	return nil
}

// podRunnerUnavailable says why Pods cannot run here, or "" when they can.
func podRunnerUnavailable(mode string) string {
	switch {
	case mode == "off":
		return "turned off with --pod-runner=off"
	case os.Geteuid() != 0:
		return "needs root (CAP_NET_ADMIN) to give each Pod a network namespace"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "needs iproute2's ip command"
	}
	return ""
}

// waitControllers waits until kube-controller-manager has done visible
// work: the default ServiceAccount of the default namespace exists.
func waitControllers(ctx context.Context, config *rest.Config, done <-chan error) error {
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return nil
		}
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return errors.New("kube-controller-manager made no default ServiceAccount in time")
		case <-tick.C:
		}
	}
}

// stopSelf delivers SIGTERM to this process, which is what the apiserver's
// own signal handler listens for.
func stopSelf() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
}

// waitApiserver gives the apiserver a short while to finish. Open watches
// keep its HTTP server draining until their own timeouts; the process exits
// after this anyway, which ends them.
func waitApiserver(done <-chan error) {
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		fmt.Fprintln(os.Stderr, "cluster: kube-apiserver still draining after 5s; exiting")
	}
}

func startEtcd(dataDir string) (*embed.Etcd, string, error) {
	clientPort, err := freePort()
	if err != nil {
		return nil, "", err
	}
	peerPort, err := freePort()
	if err != nil {
		return nil, "", err
	}
	clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}

	cfg := embed.NewConfig()
	cfg.Name = "sluice-test"
	cfg.Dir = dataDir
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	// A test control plane: durability across power loss does not matter,
	// and fsync dominates write latency.
	cfg.UnsafeNoFsync = true

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("start etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, "", errors.New("etcd did not become ready within 60s")
	}
	return e, clientURL.String(), nil
}

func waitReady(ctx context.Context, server, caFile, token string, apiserverDone <-chan error, stop <-chan struct{}) error {
	get := func(client *http.Client, path string) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+path, nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	var client *http.Client
	lastErr := errors.New("not started")
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-apiserverDone:
			return fmt.Errorf("kube-apiserver exited before it was ready: %v", err)
		case <-stop:
			return errors.New("stopped before the apiserver was ready")
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver not ready in time: %v", lastErr)
		case <-tick.C:
		}
		if client == nil {
			pool, err := loadPool(caFile)
			if err != nil {
				lastErr = err
				continue
			}
			client = &http.Client{
				Timeout:   5 * time.Second,
				Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
			}
		}
		status, err := get(client, "/readyz")
		if err != nil || status != http.StatusOK {
			lastErr = fmt.Errorf("/readyz: status %d, error %v", status, err)
			continue
		}
		status, err = get(client, "/api/v1/namespaces/default")
		if err != nil || status != http.StatusOK {
			lastErr = fmt.Errorf("namespace default: status %d, error %v", status, err)
			continue
		}
		return nil
	}
}

func loadPool(caFile string) (*x509.CertPool, error) {
	data, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("no certificates in %s", caFile)
	}
	return pool, nil
}

func writeKubeconfig(path, server, caFile, token string) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("read apiserver certificate: %w", err)
	}
	config := strings.Join([]string{
		"apiVersion: v1",
		"kind: Config",
		"clusters:",
		"- name: sluice-test",
		"  cluster:",
		"    server: " + server,
		"    certificate-authority-data: " + base64.StdEncoding.EncodeToString(ca),
		"users:",
		"- name: admin",
		"  user:",
		"    token: " + token,
		"contexts:",
		"- name: sluice-test",
		"  context:",
		"    cluster: sluice-test",
		"    user: admin",
		"current-context: sluice-test",
		"",
	}, "\n")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(config), 0o600); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return os.Rename(tmp, path)
}

func writeRSAKey(path string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("generate service account key: %w", err)
	}
	block := &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}
	return os.WriteFile(path, pem.EncodeToMemory(block), 0o600)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// adminToken returns the token in tokenFile, writing a new one if there is none.
func adminToken(tokenFile string) (string, error) {
	if data, err := os.ReadFile(tokenFile); err == nil {
		if token, _, ok := strings.Cut(string(data), ","); ok && token != "" {
			return token, nil
		}
	}
	token, err := randomHex(24)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(tokenFile, []byte(token+`,admin,admin-uid,"system:masters"`+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write token file: %w", err)
	}
	return token, nil
}

// serveControl serves test-only operations on loopback:
//
//	POST /compact  compacts etcd at its current revision; answers {"revision": N}
func serveControl(e *embed.Etcd) (net.Listener, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for control requests: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /compact", func(w http.ResponseWriter, r *http.Request) {
		rev := e.Server.KV().Rev()
		_, err := e.Server.Compact(r.Context(), &etcdserverpb.CompactionRequest{Revision: rev, Physical: true})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "{\"revision\": %d}\n", rev)
	})
	go func() { _ = http.Serve(l, mux) }()
	return l, nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
