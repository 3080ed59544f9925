package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// TestMain lets a test run this test binary as `cluster pod-exec …`, the
// way the pod runner runs its own binary.
func TestMain(m *testing.M) {
	if os.Getenv("SLUICE_TEST_POD_EXEC") == "1" {
		err := podExec(os.Args[1:])
		fmt.Fprintf(os.Stderr, "pod-exec: %v\n", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// podExecWorld is a network namespace for pod-exec to join; it needs root.
func podExecWorld(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("pod-exec needs root (network and mount namespaces)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("iproute2's ip command is not installed")
	}
	// Named as the runner names its namespaces, so that a harness sweeps it
	// should this test die before its cleanup.
	netns := fmt.Sprintf("spod-%d-%d", os.Getpid(), 16000+len(t.Name()))
	if err := ip("netns", "add", netns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ip("netns", "delete", netns) })
	return netns
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestPodExecShowsASecretVolumeAtItsMountPathAndLeavesTheMachinesPathsUntouched(t *testing.T) {
	netns := podExecWorld(t)
	dir := t.TempDir()

	// The Secret volume, as the runner writes it for the tls-backend
	// Deployment of the conformance suite (items tls.crt → crt, tls.key → key).
	secret := filepath.Join(dir, "volumes", "secret-volume")
	if err := writeVolume(secret, []volumeFile{{path: "crt", data: []byte("CERT"), mode: 0o644}, {path: "key", data: []byte("KEY"), mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	// A ConfigMap volume mounted over a directory that exists on the machine
	// and holds the container's program itself, as coredns's Corefile
	// volume at /root does when the image was built under /root/.cache.
	conf := filepath.Join(dir, "volumes", "conf")
	if err := writeVolume(conf, []volumeFile{{path: "Corefile", data: []byte(".:53 {}"), mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "host-file"), []byte("machine's"), 0o644); err != nil {
		t.Fatal(err)
	}
	sh := filepath.Join(home, "sh")
	copyFile(t, "/bin/sh", sh, 0o755)
	// A mount point that does not exist on the machine, below /etc.
	target := fmt.Sprintf("/etc/sluice-test-secret-volume-%d", os.Getpid())
	t.Cleanup(func() { _ = os.Remove(target) })
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Fatalf("%s exists before the test: %v", target, err)
	}
	etcBefore := listDir(t, "/etc")

	spec, _ := json.Marshal(mountSpec{
		Mounts: []podMount{
			{Source: secret, Target: target, ReadOnly: true},
			{Source: conf, Target: home, ReadOnly: true},
		},
		Scratch: filepath.Join(dir, "mounts", "c"),
	})
	mounts := filepath.Join(dir, "c.mounts.json")
	if err := os.WriteFile(mounts, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`
		echo "crt=$(cat %[1]s/crt) key=$(cat %[1]s/key)"
		echo "home=$(ls %[2]s | tr '\n' ' ')"
		echo "corefile=$(cat %[2]s/Corefile)"
		echo "hostname=$(cat /proc/sys/kernel/hostname)"
		echo "nsfs=$(grep -c ' - nsfs ' /proc/self/mountinfo)"
		if echo x > %[1]s/new 2>/dev/null; then echo writable; else echo read-only; fi
	`, target, home)
	cmd := exec.Command(os.Args[0], "--mounts", mounts, netns, "web-1", sh, "-c", script)
	cmd.Env = append(os.Environ(), "SLUICE_TEST_POD_EXEC=1")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pod-exec: %v\n%s", err, out)
	}
	for _, want := range []string{
		"crt=CERT key=KEY\n",
		"home=Corefile \n",
		"corefile=.:53 {}\n",
		"hostname=web-1\n",
		"nsfs=0\n",
		"read-only\n",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the container did not see %q; it printed:\n%s", want, out)
		}
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("the mount point %s was made on the machine: %v", target, err)
	}
	if after := listDir(t, "/etc"); !reflect.DeepEqual(after, etcBefore) {
		t.Errorf("/etc changed on the machine: before %v, after %v", etcBefore, after)
	}
	if got := listDir(t, home); !reflect.DeepEqual(got, []string{"host-file", "sh"}) {
		t.Errorf("the machine's directory under the mount changed: %v", got)
	}
	if got := listDir(t, secret); !reflect.DeepEqual(got, []string{"crt", "key"}) {
		t.Errorf("the volume changed: %v", got)
	}
}

func TestPodExecRefusesAMountPointAtTheRootOfTheFileSystem(t *testing.T) {
	netns := podExecWorld(t)
	dir := t.TempDir()
	target := fmt.Sprintf("/sluice-test-volume-%d", os.Getpid())
	spec, _ := json.Marshal(mountSpec{Mounts: []podMount{{Source: dir, Target: target}}, Scratch: filepath.Join(dir, "scratch")})
	mounts := filepath.Join(dir, "m.json")
	if err := os.WriteFile(mounts, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "--mounts", mounts, netns, "p", "/bin/true")
	cmd.Env = append(os.Environ(), "SLUICE_TEST_POD_EXEC=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "root of the file system") {
		t.Fatalf("want a refusal naming the root of the file system, got %v:\n%s", err, out)
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Fatalf("%s was made on the machine", target)
	}
}
