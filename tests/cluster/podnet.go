package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// podNetwork gives each Pod its own Linux network namespace, joined to the
// root namespace by a veth pair on a /30 of the harness's block of podCIDR
// (below): the root side is `.1`, the Pod's `eth0` is `.2` and its default
// route points back at `.1`. A Pod therefore has its own ports (three
// replicas can all listen on :8080) and an address the apiserver accepts in
// an EndpointSlice (it refuses loopback), which Sluice and the probes reach
// directly from the root namespace. Nothing routes between Pods or out of
// the machine.
//
// Names carry this process's pid (namespaces `spod-<pid>-<n>`, root-side
// veths `sp<pid>h<n>`), so a harness can sweep what a crashed one left
// behind, and the test suite's own hosts (`sluice-*`, `sl*`, 10.244.0.0/16)
// never collide with them.
//
// Harnesses running at once on one machine (several test runs, or `deno task
// cluster` beside one) must not hand out the same address: their root-side
// veths would share a subnet and one harness's requests reach the other's
// Pods. Each takes a block of its own, held by a lock on a file for as long
// as it runs (released by the kernel if it dies).
type podNetwork struct {
	mu     sync.Mutex
	prefix netip.Prefix
	lock   *os.File // the block's lock, held while the harness runs
	used   map[int]bool
	next   int
}

// podCIDR is where Pod addresses come from, in blocks of podBlockBits: 16
// harnesses at once, each with a /20, one /30 per Pod, 1,024 Pods.
const (
	podCIDR      = "10.245.0.0/16"
	podBlockBits = 20
)

// podBlockLocks is where the blocks' lock files are.
var podBlockLocks = "/run/sluice-pod-runner"

// podAddress is one Pod's slice of the network.
type podAddress struct {
	index     int
	namespace string // network namespace name
	hostVeth  string
	gateway   netip.Addr // root side
	address   netip.Addr // the Pod's IP
}

func newPodNetwork() (*podNetwork, error) {
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, errors.New("iproute2's ip command is not installed")
	}
	prefix, lock, err := claimPodBlock()
	if err != nil {
		return nil, err
	}
	return &podNetwork{prefix: prefix, lock: lock, used: map[int]bool{}}, nil
}

// claimPodBlock takes the first block of podCIDR that no other running
// harness holds.
func claimPodBlock() (netip.Prefix, *os.File, error) {
	all, err := netip.ParsePrefix(podCIDR)
	if err != nil {
		return netip.Prefix{}, nil, err
	}
	if err := os.MkdirAll(podBlockLocks, 0o755); err != nil {
		return netip.Prefix{}, nil, fmt.Errorf("pod address blocks: %w", err)
	}
	blocks := 1 << (podBlockBits - all.Bits())
	base := all.Addr().As4()
	for i := 0; i < blocks; i++ {
		// os.OpenFile sets O_CLOEXEC: Pods' processes do not inherit the lock.
		f, err := os.OpenFile(filepath.Join(podBlockLocks, fmt.Sprintf("block-%d.lock", i)), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return netip.Prefix{}, nil, fmt.Errorf("pod address blocks: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			_ = f.Close()
			continue
		}
		v := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
		v += uint32(i) << (32 - podBlockBits)
		addr := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
		return netip.PrefixFrom(addr, podBlockBits), f, nil
	}
	return netip.Prefix{}, nil, fmt.Errorf("all %d Pod address blocks of %s are held by other harnesses", blocks, podCIDR)
}

func (n *podNetwork) capacity() int { return 1 << (32 - n.prefix.Bits() - 2) }

// allocate creates the namespace and veth pair for a new Pod.
func (n *podNetwork) allocate() (*podAddress, error) {
	n.mu.Lock()
	index := -1
	for i := 0; i < n.capacity(); i++ {
		candidate := (n.next + i) % n.capacity()
		if !n.used[candidate] {
			index = candidate
			break
		}
	}
	if index < 0 {
		n.mu.Unlock()
		return nil, fmt.Errorf("no free Pod address left in %s", n.prefix)
	}
	n.used[index] = true
	n.next = index + 1
	n.mu.Unlock()

	base := n.prefix.Addr().As4()
	offset := uint32(index) * 4
	at := func(host uint32) netip.Addr {
		v := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
		v += offset + host
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	a := &podAddress{
		index:     index,
		namespace: fmt.Sprintf("spod-%d-%d", os.Getpid(), index),
		hostVeth:  fmt.Sprintf("sp%dh%d", os.Getpid(), index),
		gateway:   at(1),
		address:   at(2),
	}
	steps := [][]string{
		{"netns", "add", a.namespace},
		{"link", "add", a.hostVeth, "type", "veth", "peer", "name", "eth0", "netns", a.namespace},
		{"addr", "add", a.gateway.String() + "/30", "dev", a.hostVeth},
		{"link", "set", a.hostVeth, "up"},
		{"-n", a.namespace, "link", "set", "lo", "up"},
		{"-n", a.namespace, "addr", "add", a.address.String() + "/30", "dev", "eth0"},
		{"-n", a.namespace, "link", "set", "eth0", "up"},
		{"-n", a.namespace, "route", "add", "default", "via", a.gateway.String()},
	}
	for _, args := range steps {
		if err := ip(args...); err != nil {
			n.release(a)
			return nil, err
		}
	}
	return a, nil
}

// release removes the Pod's namespace (which takes its veth pair with it)
// and frees its address.
func (n *podNetwork) release(a *podAddress) {
	_ = ip("netns", "delete", a.namespace)
	_ = ip("link", "delete", a.hostVeth) // normally gone with the namespace
	n.mu.Lock()
	delete(n.used, a.index)
	n.mu.Unlock()
}

func ip(args ...string) error {
	var stderr bytes.Buffer
	cmd := exec.Command("ip", args...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

var (
	staleNamespace = regexp.MustCompile(`^spod-(\d+)-\d+$`)
	staleVeth      = regexp.MustCompile(`^\d+: (sp(\d+)h\d+)[@:]`)
)

// sweepStale removes the Pod namespaces and veths of harness processes that
// are no longer alive.
func sweepStale() []string {
	var removed []string
	alive := func(pid string) bool {
		p, err := strconv.Atoi(pid)
		if err != nil {
			return true
		}
		err = syscall.Kill(p, 0)
		return err == nil || errors.Is(err, syscall.EPERM)
	}
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
			if m := staleNamespace.FindStringSubmatch(name); m != nil && !alive(m[1]) {
				if ip("netns", "delete", name) == nil {
					removed = append(removed, name)
				}
			}
		}
	}
	if out, err := exec.Command("ip", "-o", "link", "show").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if m := staleVeth.FindStringSubmatch(line); m != nil && !alive(m[2]) {
				if ip("link", "delete", m[1]) == nil {
					removed = append(removed, m[1])
				}
			}
		}
	}
	return removed
}
