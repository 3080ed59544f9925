package main

import (
	"bufio"
	"os/exec"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// startShell runs a shell script as a container's process, outside any Pod
// network (stopProcess needs none), and marks it stopped when it exits.
func startShell(t *testing.T, w *podWorker, script string) *containerRun {
	t.Helper()
	// The script says "ready" once its trap is set: a signal before that
	// would meet the shell's default disposition.
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("script did not get ready: %q, %v", line, err)
	}
	c := &containerRun{spec: corev1.Container{Name: "c"}, cmd: cmd, running: true}
	go func() {
		_ = cmd.Wait()
		w.mu.Lock()
		c.running = false
		w.mu.Unlock()
		w.poke()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return c
}

func TestStopProcessKillsAProcessIgnoringSIGTERMAtTheDeadline(t *testing.T) {
	w := &podWorker{wake: make(chan struct{}, 1)}
	// Ignores SIGTERM; `exec sleep` would lose the trap, so the shell waits.
	c := startShell(t, w, `trap "" TERM; echo ready; while :; do sleep 0.05; done`)
	started := time.Now()
	w.stopProcess(c, started.Add(700*time.Millisecond))
	waitStopped(t, w, c, 5*time.Second)
	took := time.Since(started)
	if took < 650*time.Millisecond {
		t.Fatalf("stopped after %v: SIGTERM should have been ignored until the deadline", took)
	}
	status := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !status.Signaled() || status.Signal() != syscall.SIGKILL {
		t.Fatalf("want SIGKILL at the deadline, got %v", c.cmd.ProcessState)
	}
}

func TestStopProcessEndsAProcessThatHonoursSIGTERMAtOnce(t *testing.T) {
	w := &podWorker{wake: make(chan struct{}, 1)}
	c := startShell(t, w, `trap "exit 0" TERM; echo ready; while :; do sleep 0.05; done`)
	started := time.Now()
	w.stopProcess(c, started.Add(30*time.Second))
	waitStopped(t, w, c, 5*time.Second)
	if took := time.Since(started); took > 2*time.Second {
		t.Fatalf("took %v: SIGTERM should end it well before the 30 s deadline", took)
	}
	if code := c.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("want exit 0 from its SIGTERM trap, got %v", c.cmd.ProcessState)
	}
}

func waitStopped(t *testing.T, w *podWorker, c *containerRun, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for {
		w.mu.Lock()
		running := c.running
		w.mu.Unlock()
		if !running {
			return
		}
		select {
		case <-w.wake:
		case <-deadline:
			t.Fatalf("process still running after %v", within)
		}
	}
}

func TestImageNameDropsRegistryDefaultsTagsAndDigests(t *testing.T) {
	for in, want := range map[string]string{
		"traefik/whoami":                                  "traefik/whoami",
		"traefik/whoami:v1.10":                            "traefik/whoami",
		"docker.io/traefik/whoami:v1.10":                  "traefik/whoami",
		"registry.k8s.io/gateway-api/echo-basic:v1.5.1":   "registry.k8s.io/gateway-api/echo-basic",
		"registry.k8s.io/gateway-api/echo-basic@sha256:0": "registry.k8s.io/gateway-api/echo-basic",
		"localhost:5000/web:1":                            "localhost:5000/web",
		"localhost:5000/web":                              "localhost:5000/web",
		"nginx":                                           "nginx",
		"docker.io/library/nginx:1.27":                    "nginx",
	} {
		if got := imageName(in); got != want {
			t.Errorf("imageName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestExpandFollowsTheKubeletsRules(t *testing.T) {
	values := map[string]string{"A": "1", "B": "two"}
	for in, want := range map[string]string{
		"$(A)":       "1",
		"x$(B)y":     "xtwoy",
		"$$(A)":      "$(A)",
		"$(MISSING)": "$(MISSING)",
		"plain":      "plain",
		"$(A)$(B)$$": "1two$",
	} {
		if got := expand(in, values); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}
