package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path"
	"runtime"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

// podRunner stands in for a kubelet (and for the scheduler, which it also
// replaces): it registers one Node, binds every pending Pod to it, and runs
// each Pod's containers as local processes in a network namespace of the
// Pod's own, reporting their status the way the kubelet does, so that the
// real kube-controller-manager's Deployment, ReplicaSet and EndpointSlice
// controllers see Pods start, become Ready and go away.
//
// An image is a program built from Go sources, chosen by the image's name
// without tag or digest (see imageName); any other image leaves its Pod
// Pending with an Event that says why. Secret, ConfigMap, emptyDir, downward
// API and projected volumes are mounted (podvolumes.go, podexec.go).
// Containers' output is kept and served to the apiserver as the kubelet's
// does, for `kubectl logs` (podlogs.go, kubeletserver.go). What a
// kubelet does and this does not (other volume types, exec probes, resource
// limits, hostNetwork, …) is listed in docs/development.md.
type podRunner struct {
	ctx      context.Context
	client   kubernetes.Interface
	node     string
	nodeIP   string
	images   map[string]string // image name → program
	self     string            // this binary, for its pod-exec step
	podsDir  string
	network  *podNetwork
	recorder record.EventRecorder
	events   record.EventBroadcaster
	kubelet  *kubeletServer // serves containers' logs to the apiserver

	mu       sync.Mutex
	workers  map[types.UID]*podWorker
	stopping bool
	wg       sync.WaitGroup
}

type podRunnerOptions struct {
	node    string
	images  map[string]string
	podsDir string
	// kubeletCerts secure the endpoint the apiserver reads Pod logs from.
	kubeletCerts *kubeletCerts
}

func startPodRunner(ctx context.Context, config *rest.Config, opts podRunnerOptions) (*podRunner, error) {
	network, err := newPodNetwork()
	if err != nil {
		return nil, err
	}
	if removed := sweepStale(); len(removed) > 0 {
		fmt.Fprintf(os.Stderr, "pod runner: removed %d network namespaces and links left by an earlier run\n", len(removed))
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	config = rest.CopyConfig(config)
	config.QPS, config.Burst = 200, 400
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	events := record.NewBroadcaster(record.WithContext(ctx))
	events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	r := &podRunner{
		ctx:      ctx,
		client:   client,
		node:     opts.node,
		nodeIP:   "127.0.0.1",
		images:   opts.images,
		self:     self,
		podsDir:  opts.podsDir,
		network:  network,
		events:   events,
		recorder: events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: opts.node}),
		workers:  map[types.UID]*podWorker{},
	}
	r.kubelet, err = startKubeletServer(opts.kubeletCerts, r.nodeIP, r)
	if err != nil {
		return nil, err
	}
	if err := r.registerNode(ctx); err != nil {
		r.kubelet.close()
		return nil, err
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	pods := factory.Core().V1().Pods().Informer()
	_, err = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.observe(obj) },
		UpdateFunc: func(_, obj any) { r.observe(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				r.gone(pod)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced) {
		r.kubelet.close()
		return nil, fmt.Errorf("pod runner: the Pod watch did not sync")
	}
	return r, nil
}

// registerNode creates (or takes over) the Node the runner's Pods are bound
// to, reporting it Ready.
func (r *podRunner) registerNode(ctx context.Context) error {
	nodes := r.client.CoreV1().Nodes()
	node, err := nodes.Get(ctx, r.node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err = nodes.Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name: r.node,
				Labels: map[string]string{
					"kubernetes.io/hostname": r.node,
					"kubernetes.io/os":       "linux",
					"kubernetes.io/arch":     runtime.GOARCH,
				},
			},
			Spec: corev1.NodeSpec{PodCIDR: r.network.prefix.String(), PodCIDRs: []string{r.network.prefix.String()}},
		}, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("register node %q: %w", r.node, err)
	}
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("500"),
	}
	node.Status = corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Phase:       corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "the pod runner is ready", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", LastHeartbeatTime: now, LastTransitionTime: now},
		},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: r.nodeIP},
			{Type: corev1.NodeHostName, Address: r.node},
		},
		// Where the apiserver reads Pods' logs (kubeletserver.go).
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: r.kubelet.port()}},
		NodeInfo: corev1.NodeSystemInfo{
			OperatingSystem:         "linux",
			Architecture:            runtime.GOARCH,
			KubeletVersion:          "v1.36.3",
			ContainerRuntimeVersion: "sluice-pod-runner://1",
			OSImage:                 "processes in network namespaces",
		},
	}
	if _, err := nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("report node %q ready: %w", r.node, err)
	}
	return nil
}

// observe is called for every Pod the watch reports.
func (r *podRunner) observe(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if pod.Spec.NodeName == "" {
		if pod.DeletionTimestamp == nil && len(pod.Spec.SchedulingGates) == 0 {
			go r.bind(pod)
		}
		return
	}
	if pod.Spec.NodeName != r.node {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopping {
		return
	}
	w := r.workers[pod.UID]
	if w == nil {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			if pod.DeletionTimestamp != nil {
				go r.deleteNow(pod)
			}
			return
		}
		w = newPodWorker(r, pod)
		r.workers[pod.UID] = w
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			w.run()
			r.mu.Lock()
			delete(r.workers, pod.UID)
			r.mu.Unlock()
		}()
		return
	}
	w.update(pod)
}

func (r *podRunner) gone(pod *corev1.Pod) {
	r.mu.Lock()
	w := r.workers[pod.UID]
	r.mu.Unlock()
	if w != nil {
		w.objectGone()
	}
}

// bind schedules a Pod onto the runner's Node, as kube-scheduler would.
func (r *podRunner) bind(pod *corev1.Pod) {
	err := r.client.CoreV1().Pods(pod.Namespace).Bind(r.ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: r.node},
	}, metav1.CreateOptions{})
	switch {
	case err == nil:
		r.recorder.Eventf(pod, corev1.EventTypeNormal, "Scheduled", "Successfully assigned %s/%s to %s", pod.Namespace, pod.Name, r.node)
	case apierrors.IsConflict(err), apierrors.IsNotFound(err), r.ctx.Err() != nil:
		// Bound already (a repeated watch event), or gone.
	default:
		fmt.Fprintf(os.Stderr, "pod runner: cannot bind Pod %s/%s: %v\n", pod.Namespace, pod.Name, err)
	}
}

// deleteNow removes a Pod object whose containers have all stopped, as the
// kubelet's status manager does once a deleted Pod is terminated.
func (r *podRunner) deleteNow(pod *corev1.Pod) {
	zero := int64(0)
	err := r.client.CoreV1().Pods(pod.Namespace).Delete(r.ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero,
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && r.ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "pod runner: cannot delete Pod %s/%s: %v\n", pod.Namespace, pod.Name, err)
	}
}

// stop ends every Pod's processes at once (the whole control plane is going
// away) and removes their network namespaces.
func (r *podRunner) stop() {
	r.mu.Lock()
	r.stopping = true
	workers := make([]*podWorker, 0, len(r.workers))
	for _, w := range r.workers {
		workers = append(workers, w)
	}
	r.mu.Unlock()
	for _, w := range workers {
		w.objectGone()
	}
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		fmt.Fprintln(os.Stderr, "pod runner: Pods still stopping after 10s; exiting")
	}
	r.kubelet.close()
	r.events.Shutdown()
}

// containerLog finds the log of container `container` of Pod
// `namespace`/`pod`, for the kubelet endpoint. Of two Pods of one name (one
// deleted, its successor created), the one not being deleted answers.
func (r *podRunner) containerLog(namespace, pod, container string) (*containerLog, error) {
	key := namespace + "/" + pod
	r.mu.Lock()
	var found *podWorker
	for _, w := range r.workers {
		if w.key != key {
			continue
		}
		if p := w.current(); found == nil || p.DeletionTimestamp == nil {
			found = w
		}
	}
	r.mu.Unlock()
	if found == nil {
		return nil, &logLookupError{status: http.StatusNotFound, msg: fmt.Sprintf("pod %q does not exist", pod)}
	}
	return found.containerLog(container)
}

// imageName reduces an image reference to the name the runner knows images
// by: no registry default (`docker.io/`, `library/`), no tag, no digest.
func imageName(image string) string {
	name, _, _ := strings.Cut(image, "@")
	if slash := strings.LastIndex(name, "/"); strings.LastIndex(name, ":") > slash {
		name = name[:strings.LastIndex(name, ":")]
	}
	name = strings.TrimPrefix(name, "docker.io/")
	name = strings.TrimPrefix(name, "index.docker.io/")
	name = strings.TrimPrefix(name, "library/")
	return name
}

// program returns what runs for a container: the image's program and its
// arguments. A command other than the image's own program cannot run.
func (r *podRunner) program(c *corev1.Container) (string, []string, error) {
	bin, ok := r.images[imageName(c.Image)]
	if !ok {
		known := make([]string, 0, len(r.images))
		for name := range r.images {
			known = append(known, name)
		}
		return "", nil, fmt.Errorf("the pod runner cannot run image %q: it runs only %s", c.Image, strings.Join(sorted(known), ", "))
	}
	args := c.Args
	if len(c.Command) > 0 {
		if path.Base(c.Command[0]) != path.Base(bin) {
			return "", nil, fmt.Errorf("the pod runner runs only the image's own program %q, not command %q", path.Base(bin), c.Command[0])
		}
		args = append(append([]string{}, c.Command[1:]...), c.Args...)
	}
	return bin, args, nil
}
