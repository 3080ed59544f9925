package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// podWorker runs one Pod: its network namespace, its containers' processes,
// their probes, and the Pod's status, from binding to deletion.
//
//	Pending (waiting for its network and first start, or for an image it cannot run)
//	→ Running (processes started) → Ready (every readiness probe passing)
//	→ terminating (deletionTimestamp: preStop, SIGTERM, SIGKILL after the grace period)
//	→ gone (status written, the object deleted with grace 0, the namespace removed)
type podWorker struct {
	r    *podRunner
	key  string
	wake chan struct{}

	mu         sync.Mutex
	pod        *corev1.Pod
	objectLost bool

	addr        *podAddress
	dir         string
	containers  []*containerRun
	started     metav1.Time
	transitions map[corev1.PodConditionType]metav1.Time
	written     *corev1.PodStatus
	unrunnable  string // why the Pod cannot run, when it cannot
	waitReason  string // the waiting reason reported with it
	terminating bool

	warnedVolumes bool // unsupported volume types were reported

	logs map[string]*containerLog // by container name, once it started; guarded by mu
}

// containerRun is one container's process and probe state.
type containerRun struct {
	spec    corev1.Container
	program string
	args    []string
	logs    *containerLog // its output, across restarts

	// Guarded by the worker's mu.
	cmd        *exec.Cmd
	running    bool
	started    bool // the startup probe passed (or there is none)
	ready      bool
	startedAt  metav1.Time
	restarts   int32
	last       *corev1.ContainerStateTerminated
	restartAt  time.Time
	backoff    time.Duration
	stopProbes context.CancelFunc
}

func newPodWorker(r *podRunner, pod *corev1.Pod) *podWorker {
	return &podWorker{
		r:           r,
		key:         pod.Namespace + "/" + pod.Name,
		wake:        make(chan struct{}, 1),
		pod:         pod,
		transitions: map[corev1.PodConditionType]metav1.Time{},
	}
}

func (w *podWorker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *podWorker) update(pod *corev1.Pod) {
	w.mu.Lock()
	w.pod = pod
	w.mu.Unlock()
	w.poke()
}

func (w *podWorker) objectGone() {
	w.mu.Lock()
	w.objectLost = true
	w.mu.Unlock()
	w.poke()
}

func (w *podWorker) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pod runner: %s: %s\n", w.key, fmt.Sprintf(format, args...))
}

func (w *podWorker) run() {
	pod := w.current()
	w.started = metav1.Now()
	if reason, err := w.prepare(pod); err != nil {
		w.mu.Lock()
		w.unrunnable, w.waitReason = err.Error(), reason
		w.mu.Unlock()
		if !errors.Is(err, errStopped) {
			w.r.recorder.Eventf(pod, corev1.EventTypeWarning, "Failed", "Error: %s: %v", reason, err)
			w.logf("cannot run: %v", err)
		}
	}
	defer w.cleanUp()
	for {
		pod, lost := w.snapshot()
		if lost || w.r.ctx.Err() != nil {
			w.killAll(2 * time.Second)
			return
		}
		if pod.DeletionTimestamp != nil && !w.terminating {
			w.terminating = true
			w.beginTermination(pod)
		}
		if w.terminating && !w.anyRunning() {
			w.writeStatus(pod)
			w.r.deleteNow(pod)
			return
		}
		next := w.restartDue()
		w.writeStatus(pod)
		var timer <-chan time.Time
		if !next.IsZero() {
			timer = time.After(time.Until(next))
		}
		select {
		case <-w.wake:
		case <-timer:
		case <-w.r.ctx.Done():
		}
	}
}

func (w *podWorker) current() *corev1.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pod
}

func (w *podWorker) snapshot() (*corev1.Pod, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pod, w.objectLost
}

// errStopped ends a Pod's preparation when the Pod is deleted or the runner
// stops before its containers started.
var errStopped = errors.New("stopped before its containers started")

// prepare resolves every container's program, creates the Pod's network and
// volumes (waiting, as the kubelet does, for Secrets and ConfigMaps that do
// not exist yet). Init containers are run to completion, in order, as the
// kubelet does.
//
// On failure it returns the waiting reason to report (ErrImagePull for an
// image it cannot run, as a kubelet that cannot pull it would) with the error.
func (w *podWorker) prepare(pod *corev1.Pod) (string, error) {
	for i := range pod.Spec.InitContainers {
		if _, _, err := w.r.program(&pod.Spec.InitContainers[i]); err != nil {
			return "ErrImagePull", err
		}
	}
	for i := range pod.Spec.Containers {
		c := pod.Spec.Containers[i]
		program, args, err := w.r.program(&c)
		if err != nil {
			return "ErrImagePull", err
		}
		w.containers = append(w.containers, &containerRun{spec: c, program: program, args: args, backoff: time.Second})
	}
	if pod.Spec.HostNetwork {
		return "CreateContainerConfigError", errors.New("the pod runner cannot run hostNetwork Pods")
	}
	addr, err := w.r.network.allocate()
	if err != nil {
		return "CreatePodSandboxError", fmt.Errorf("create the Pod's network: %w", err)
	}
	w.addr = addr
	w.dir = filepath.Join(w.r.podsDir, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID))
	if err := os.MkdirAll(w.dir, 0o755); err != nil {
		return "CreateContainerError", err
	}
	if err := w.waitForVolumes(); err != nil {
		return "CreateContainerConfigError", err
	}
	pod = w.current()
	for i := range pod.Spec.InitContainers {
		c := pod.Spec.InitContainers[i]
		program, args, _ := w.r.program(&c)
		run := &containerRun{spec: c, program: program, args: args}
		if err := w.start(pod, run); err != nil {
			return "CreateContainerConfigError", err
		}
		for w.containerRunning(run) {
			if _, lost := w.snapshot(); lost || w.r.ctx.Err() != nil {
				return "", errStopped
			}
			select {
			case <-w.wake:
			case <-time.After(50 * time.Millisecond):
			}
		}
		if last := run.last; last == nil || last.ExitCode != 0 {
			return "InitContainerFailed", fmt.Errorf("init container %q failed", c.Name)
		}
	}
	for _, c := range w.containers {
		if err := w.start(pod, c); err != nil {
			return "CreateContainerConfigError", err
		}
	}
	return "", nil
}

// waitForVolumes makes the Pod's volumes, trying again while a Secret,
// ConfigMap or ServiceAccount they need is missing, with a FailedMount
// Event at the first failure and every minute after, as the kubelet does.
// The Pod is reported Pending (ContainerCreating) meanwhile.
func (w *podWorker) waitForVolumes() error {
	delay := 200 * time.Millisecond
	var reported time.Time
	for {
		pod, lost := w.snapshot()
		if lost || pod.DeletionTimestamp != nil || w.r.ctx.Err() != nil {
			return errStopped
		}
		err := w.makeVolumes(w.r.ctx, pod)
		var notReady errVolumeNotReady
		if err == nil || !errors.As(err, &notReady) {
			return err
		}
		if time.Since(reported) > time.Minute {
			if reported.IsZero() {
				w.writeStatus(pod)
			}
			reported = time.Now()
			w.r.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedMount", "%v", err)
			w.logf("waiting: %v", err)
		}
		select {
		case <-w.wake:
		case <-time.After(delay):
		case <-w.r.ctx.Done():
		}
		delay = min(delay*2, 2*time.Second)
	}
}

func (w *podWorker) containerRunning(c *containerRun) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return c.running
}

// start launches a container's process inside the Pod's namespaces and its
// probes.
func (w *podWorker) start(pod *corev1.Pod, c *containerRun) error {
	env, err := w.r.containerEnv(w.r.ctx, pod, &c.spec, w.addr.address.String())
	if err != nil {
		w.r.recorder.Eventf(pod, corev1.EventTypeWarning, "Failed", "Error: %v", err)
		return err
	}
	args := expandArgs(c.args, env)
	mounts, err := w.containerMounts(pod, &c.spec, env)
	if err != nil {
		w.r.recorder.Eventf(pod, corev1.EventTypeWarning, "Failed", "Error: %v", err)
		return err
	}
	execArgs := []string{"pod-exec"}
	if len(mounts) > 0 {
		file := filepath.Join(w.dir, c.spec.Name+".mounts.json")
		spec, err := json.Marshal(mountSpec{Mounts: mounts, Scratch: filepath.Join(w.dir, "mounts", c.spec.Name)})
		if err != nil {
			return err
		}
		if err := os.WriteFile(file, spec, 0o644); err != nil {
			return err
		}
		execArgs = append(execArgs, "--mounts", file)
	}
	execArgs = append(execArgs, w.addr.namespace, pod.Name, c.program)
	cmd := exec.Command(w.r.self, append(execArgs, args...)...)
	cmd.Env = env
	cmd.Dir = w.dir
	// Its output goes to the container's log, a run at a time, as a
	// container runtime's does (podlogs.go).
	stdout, stdoutW, err := os.Pipe()
	if err != nil {
		return err
	}
	stderr, stderrW, err := os.Pipe()
	if err != nil {
		_, _ = stdout.Close(), stdoutW.Close()
		return err
	}
	cmd.Stdout, cmd.Stderr = stdoutW, stderrW
	// Its own process group (so a signal to the harness's terminal does not
	// reach it), and SIGKILL should the harness die first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	_, _ = stdoutW.Close(), stderrW.Close()
	if err != nil {
		_, _ = stdout.Close(), stderr.Close()
		return fmt.Errorf("start container %q: %w", c.spec.Name, err)
	}
	w.logFor(c).begin(stdout, stderr)
	w.r.recorder.Eventf(pod, corev1.EventTypeNormal, "Started", "Started container %s", c.spec.Name)
	w.mu.Lock()
	c.cmd = cmd
	c.running = true
	c.started = c.spec.StartupProbe == nil
	c.ready = c.started && c.spec.ReadinessProbe == nil
	c.startedAt = metav1.Now()
	c.restartAt = time.Time{}
	ctx, cancel := context.WithCancel(w.r.ctx)
	c.stopProbes = cancel
	w.mu.Unlock()
	go w.probe(ctx, pod, c)
	go func() {
		err := cmd.Wait()
		code := int32(0)
		if cmd.ProcessState != nil {
			code = int32(cmd.ProcessState.ExitCode())
			if status, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && status.Signaled() {
				code = 128 + int32(status.Signal())
			}
		} else if err != nil {
			code = 128
		}
		reason := "Completed"
		if code != 0 {
			reason = "Error"
		}
		w.mu.Lock()
		c.running, c.ready = false, false
		c.last = &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, StartedAt: c.startedAt, FinishedAt: metav1.Now()}
		cancel()
		w.mu.Unlock()
		w.poke()
	}()
	return nil
}

// logFor returns the log of a container, made at its first start.
func (w *podWorker) logFor(c *containerRun) *containerLog {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.logs == nil {
		if w.logs == nil {
			w.logs = map[string]*containerLog{}
		}
		c.logs = &containerLog{}
		w.logs[c.spec.Name] = c.logs
	}
	return c.logs
}

// containerLog returns the log of one of the Pod's containers (init
// containers included), with the kubelet's answers when there is none: 404
// for a name the Pod does not have, 400 for a container not started yet.
func (w *podWorker) containerLog(name string) (*containerLog, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if log := w.logs[name]; log != nil {
		return log, nil
	}
	known := false
	for _, list := range [][]corev1.Container{w.pod.Spec.InitContainers, w.pod.Spec.Containers} {
		for i := range list {
			known = known || list[i].Name == name
		}
	}
	if !known {
		return nil, &logLookupError{status: http.StatusNotFound, msg: fmt.Sprintf("container %q not found in pod %q", name, w.pod.Name)}
	}
	reason := w.waitReason
	if reason == "" {
		reason = "ContainerCreating"
	}
	return nil, &logLookupError{status: http.StatusBadRequest, msg: fmt.Sprintf("container %q in pod %q is waiting to start: %s", name, w.pod.Name, reason)}
}

// probe runs a container's startup, readiness and liveness probes until the
// container stops, as the kubelet's probe workers do.
func (w *podWorker) probe(ctx context.Context, pod *corev1.Pod, c *containerRun) {
	spec := c.spec
	ip := w.addr.address.String()
	loop := func(p *corev1.Probe, apply func(ok bool, result probeResult) bool) {
		if p == nil {
			return
		}
		period := time.Duration(max(p.PeriodSeconds, 1)) * time.Second
		success, failure := max(p.SuccessThreshold, 1), max(p.FailureThreshold, 1)
		var successes, failures int32
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(p.InitialDelaySeconds) * time.Second):
		}
		ticker := time.NewTicker(period)
		defer ticker.Stop()
		for {
			result := runProbe(ctx, p, ip, &spec)
			if ctx.Err() != nil {
				return
			}
			if result.ok {
				successes, failures = successes+1, 0
			} else {
				successes, failures = 0, failures+1
			}
			var verdict *bool
			if successes >= success {
				t := true
				verdict = &t
			} else if failures >= failure {
				f := false
				verdict = &f
			}
			if verdict != nil && !apply(*verdict, result) {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}
	startup := make(chan struct{})
	go func() {
		defer close(startup)
		loop(spec.StartupProbe, func(ok bool, result probeResult) bool {
			if !ok {
				w.r.recorder.Eventf(pod, corev1.EventTypeWarning, "Unhealthy", "Startup probe failed: %s", result.reason)
				w.kill(c, pod, "failed startup probe")
				return false
			}
			w.mu.Lock()
			c.started = true
			c.ready = c.spec.ReadinessProbe == nil
			w.mu.Unlock()
			w.poke()
			return false // a startup probe ends at its first success
		})
	}()
	select {
	case <-ctx.Done():
		return
	case <-startup:
	}
	go loop(spec.LivenessProbe, func(ok bool, result probeResult) bool {
		if !ok {
			w.r.recorder.Eventf(pod, corev1.EventTypeWarning, "Unhealthy", "Liveness probe failed: %s", result.reason)
			w.kill(c, pod, "failed liveness probe")
			return false
		}
		return true
	})
	loop(spec.ReadinessProbe, func(ok bool, result probeResult) bool {
		w.mu.Lock()
		changed := c.ready != ok && c.running
		if changed {
			c.ready = ok
		}
		w.mu.Unlock()
		if !ok {
			w.r.recorder.Eventf(pod, corev1.EventTypeWarning, "Unhealthy", "Readiness probe failed: %s", result.reason)
		}
		if changed {
			w.poke()
		}
		return true
	})
}

// kill stops one container with its grace period (liveness or startup
// failure); the restart policy decides what follows.
func (w *podWorker) kill(c *containerRun, pod *corev1.Pod, why string) {
	w.r.recorder.Eventf(pod, corev1.EventTypeNormal, "Killing", "Container %s %s, will be restarted", c.spec.Name, why)
	grace := int64(30)
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		grace = *pod.Spec.TerminationGracePeriodSeconds
	}
	go w.stopProcess(c, time.Now().Add(time.Duration(grace)*time.Second))
}

// beginTermination runs each container's preStop hook, then SIGTERM, then
// SIGKILL at the end of the grace period the apiserver set on deletion.
func (w *podWorker) beginTermination(pod *corev1.Pod) {
	grace := int64(30)
	if pod.DeletionGracePeriodSeconds != nil {
		grace = *pod.DeletionGracePeriodSeconds
	} else if pod.Spec.TerminationGracePeriodSeconds != nil {
		grace = *pod.Spec.TerminationGracePeriodSeconds
	}
	deadline := time.Now().Add(time.Duration(grace) * time.Second)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.containers {
		c.restartAt = time.Time{}
		if !c.running {
			continue
		}
		w.r.recorder.Eventf(pod, corev1.EventTypeNormal, "Killing", "Stopping container %s", c.spec.Name)
		go func(c *containerRun) {
			w.preStop(pod, c, deadline)
			// A hook that used up the grace period leaves the process a
			// last 2 s after SIGTERM, as the kubelet's minimum grace does.
			w.stopProcess(c, later(deadline, time.Now().Add(2*time.Second)))
		}(c)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (w *podWorker) preStop(pod *corev1.Pod, c *containerRun, deadline time.Time) {
	if c.spec.Lifecycle == nil || c.spec.Lifecycle.PreStop == nil {
		return
	}
	hook := c.spec.Lifecycle.PreStop
	ctx, cancel := context.WithDeadline(w.r.ctx, deadline)
	defer cancel()
	switch {
	case hook.Sleep != nil:
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(hook.Sleep.Seconds) * time.Second):
		}
	case hook.HTTPGet != nil:
		probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: hook.HTTPGet}}
		if result := runProbe(ctx, probe, w.addr.address.String(), &c.spec); !result.ok {
			w.r.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedPreStopHook", "PreStopHook failed: %s", result.reason)
		}
	default:
		w.r.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedPreStopHook", "PreStopHook failed: only sleep and httpGet hooks can run on the pod runner")
	}
}

// stopProcess sends SIGTERM, and SIGKILL if the process is still there at
// the deadline.
func (w *podWorker) stopProcess(c *containerRun, deadline time.Time) {
	w.mu.Lock()
	cmd, running := c.cmd, c.running
	w.mu.Unlock()
	if !running || cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		w.mu.Lock()
		running = c.running && c.cmd == cmd
		w.mu.Unlock()
		if !running {
			return
		}
		select {
		case <-timer.C:
			_ = cmd.Process.Kill()
			return
		case <-tick.C:
		}
	}
}

// killAll stops every process at once (the object is gone, or the harness
// is stopping) and waits up to `wait` for them.
func (w *podWorker) killAll(wait time.Duration) {
	w.mu.Lock()
	for _, c := range w.containers {
		c.restartAt = time.Time{}
		if c.running && c.cmd != nil && c.cmd.Process != nil {
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	w.mu.Unlock()
	deadline := time.Now().Add(wait)
	for w.anyRunning() && time.Now().Before(deadline) {
		select {
		case <-w.wake:
		case <-time.After(20 * time.Millisecond):
		}
	}
	w.mu.Lock()
	for _, c := range w.containers {
		if c.running && c.cmd != nil && c.cmd.Process != nil {
			_ = c.cmd.Process.Kill()
		}
	}
	w.mu.Unlock()
}

func (w *podWorker) anyRunning() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.containers {
		if c.running {
			return true
		}
	}
	return false
}

// restartDue restarts containers whose back-off has passed and schedules
// the ones that stopped, by the Pod's restart policy; it returns when the
// next restart is due.
func (w *podWorker) restartDue() time.Time {
	if w.terminating || w.unrunnable != "" {
		return time.Time{}
	}
	pod := w.current()
	var next time.Time
	for _, c := range w.containers {
		w.mu.Lock()
		running, last, restartAt := c.running, c.last, c.restartAt
		w.mu.Unlock()
		if running || last == nil {
			continue
		}
		policy := pod.Spec.RestartPolicy
		if policy == corev1.RestartPolicyNever || (policy == corev1.RestartPolicyOnFailure && last.ExitCode == 0) {
			continue
		}
		now := time.Now()
		if restartAt.IsZero() {
			w.mu.Lock()
			c.restartAt = now.Add(c.backoff)
			restartAt = c.restartAt
			c.backoff = min(c.backoff*2, 10*time.Second)
			w.mu.Unlock()
			w.r.recorder.Eventf(pod, corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container %s", c.spec.Name)
		}
		if !now.Before(restartAt) {
			w.mu.Lock()
			c.restarts++
			w.mu.Unlock()
			if err := w.start(pod, c); err != nil {
				w.logf("restart %s: %v", c.spec.Name, err)
			}
			continue
		}
		if next.IsZero() || restartAt.Before(next) {
			next = restartAt
		}
	}
	return next
}

// status computes the Pod's status as the kubelet would report it.
func (w *podWorker) status(pod *corev1.Pod) *corev1.PodStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := &corev1.PodStatus{StartTime: &w.started, QOSClass: pod.Status.QOSClass}
	if w.addr != nil {
		st.PodIP = w.addr.address.String()
		st.PodIPs = []corev1.PodIP{{IP: st.PodIP}}
		st.HostIP = w.r.nodeIP
		st.HostIPs = []corev1.HostIP{{IP: w.r.nodeIP}}
	}
	allReady := len(w.containers) > 0 && w.unrunnable == ""
	anyRunning, allStarted, allDone, allSucceeded := false, true, true, true
	if w.unrunnable != "" {
		allStarted, allDone = false, false
		for i := range pod.Spec.Containers {
			c := pod.Spec.Containers[i]
			st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
				Name: c.Name, Image: c.Image,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: w.waitReason, Message: w.unrunnable}},
			})
		}
	}
	for _, c := range w.containers {
		if w.unrunnable != "" {
			break
		}
		cs := corev1.ContainerStatus{
			Name: c.spec.Name, Image: c.spec.Image, ImageID: "sluice-pod-runner://" + filepath.Base(c.program),
			RestartCount: c.restarts, Ready: c.ready && c.running,
		}
		started := c.running && c.started
		cs.Started = &started
		switch {
		case c.running:
			cs.ContainerID = fmt.Sprintf("sluice-pod-runner://%d", c.cmd.Process.Pid)
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: c.startedAt}
			anyRunning = true
			allDone = false
			if c.last != nil {
				cs.LastTerminationState.Terminated = c.last
			}
		case c.last != nil && (!c.restartAt.IsZero()):
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: fmt.Sprintf("back-off restarting failed container %s", c.spec.Name)}
			cs.LastTerminationState.Terminated = c.last
			allDone = false
		case c.last != nil:
			cs.State.Terminated = c.last
			if c.last.ExitCode != 0 {
				allSucceeded = false
			}
		default:
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
			allStarted, allDone = false, false
		}
		if !cs.Ready {
			allReady = false
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
	switch {
	case allDone && len(w.containers) > 0 && (w.terminating || pod.Spec.RestartPolicy != corev1.RestartPolicyAlways):
		st.Phase = corev1.PodFailed
		if allSucceeded {
			st.Phase = corev1.PodSucceeded
		}
	case anyRunning || (allStarted && len(w.containers) > 0):
		st.Phase = corev1.PodRunning
	default:
		st.Phase = corev1.PodPending
	}
	condition := func(t corev1.PodConditionType, ok bool, reason string) corev1.PodCondition {
		status := corev1.ConditionFalse
		if ok {
			status = corev1.ConditionTrue
			reason = ""
		}
		for _, old := range pod.Status.Conditions {
			if old.Type == t && old.Status == status {
				return corev1.PodCondition{Type: t, Status: status, Reason: reason, LastTransitionTime: old.LastTransitionTime}
			}
		}
		when, seen := w.transitions[t]
		if !seen || (w.written != nil && conditionStatus(w.written, t) != status) {
			when = metav1.Now()
			w.transitions[t] = when
		}
		return corev1.PodCondition{Type: t, Status: status, Reason: reason, LastTransitionTime: when}
	}
	st.Conditions = []corev1.PodCondition{
		condition(corev1.PodReadyToStartContainers, w.addr != nil, ""),
		condition(corev1.PodInitialized, w.unrunnable == "" || w.addr != nil, "ContainersNotInitialized"),
		condition(corev1.ContainersReady, allReady, "ContainersNotReady"),
		condition(corev1.PodReady, allReady, "ContainersNotReady"),
		condition(corev1.PodScheduled, true, ""),
	}
	sort.Slice(st.ContainerStatuses, func(i, j int) bool { return st.ContainerStatuses[i].Name < st.ContainerStatuses[j].Name })
	return st
}

func conditionStatus(s *corev1.PodStatus, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range s.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

// writeStatus sends the Pod's status when it differs from what was last sent.
func (w *podWorker) writeStatus(pod *corev1.Pod) {
	desired := w.status(pod)
	if w.written != nil && equality.Semantic.DeepEqual(desired, w.written) {
		return
	}
	pods := w.r.client.CoreV1().Pods(pod.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		fresh, err := pods.Get(w.r.ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if fresh.UID != pod.UID {
			return apierrors.NewNotFound(corev1.Resource("pods"), pod.Name)
		}
		fresh.Status.Phase = desired.Phase
		fresh.Status.Conditions = mergeConditions(fresh.Status.Conditions, desired.Conditions)
		fresh.Status.PodIP, fresh.Status.PodIPs = desired.PodIP, desired.PodIPs
		fresh.Status.HostIP, fresh.Status.HostIPs = desired.HostIP, desired.HostIPs
		fresh.Status.StartTime = desired.StartTime
		fresh.Status.ContainerStatuses = desired.ContainerStatuses
		_, err = pods.UpdateStatus(w.r.ctx, fresh, metav1.UpdateOptions{})
		return err
	})
	switch {
	case err == nil:
		w.written = desired
	case apierrors.IsNotFound(err), w.r.ctx.Err() != nil:
	default:
		w.logf("cannot write status: %v", err)
	}
}

// mergeConditions replaces the conditions the runner owns and keeps others
// (readiness gates' conditions, written by their controllers).
func mergeConditions(old, owned []corev1.PodCondition) []corev1.PodCondition {
	out := append([]corev1.PodCondition{}, owned...)
	for _, c := range old {
		mine := false
		for _, o := range owned {
			mine = mine || o.Type == c.Type
		}
		if !mine {
			out = append(out, c)
		}
	}
	return out
}

// cleanUp removes what the Pod held on this machine.
func (w *podWorker) cleanUp() {
	w.mu.Lock()
	for _, c := range w.containers {
		if c.stopProbes != nil {
			c.stopProbes()
		}
	}
	w.mu.Unlock()
	if w.addr != nil {
		w.r.network.release(w.addr)
	}
	if w.unrunnable != "" {
		if pod, lost := w.snapshot(); !lost && pod.DeletionTimestamp != nil {
			w.r.deleteNow(pod)
		}
	}
}
