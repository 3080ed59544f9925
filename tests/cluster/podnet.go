package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// podNetwork gives each Pod its own Linux network namespace, joined to the
// root namespace by a veth pair on a /30 of podCIDR: the root side is `.1`,
// the Pod's `eth0` is `.2` and its default route points back at `.1`. A Pod
// therefore has its own ports (three replicas can all listen on :8080) and
// an address the apiserver accepts in an EndpointSlice (it refuses
// loopback), which Sluice and the probes reach directly from the root
// namespace. Nothing routes between Pods or out of the machine.
//
// Names carry this process's pid (namespaces `spod-<pid>-<n>`, root-side
// veths `sp<pid>h<n>`), so a harness can sweep what a crashed one left
// behind, and the test suite's own hosts (`sluice-*`, `sl*`, 10.244.0.0/16)
// never collide with them.
type podNetwork struct {
	mu     sync.Mutex
	prefix netip.Prefix
	used   map[int]bool
	next   int
}

// podCIDR is where Pod addresses come from: one /30 per Pod, 16,384 Pods.
const podCIDR = "10.245.0.0/16"

// podAddress is one Pod's slice of the network.
type podAddress struct {
	index     int
	namespace string // network namespace name
	hostVeth  string
	gateway   netip.Addr // root side
	address   netip.Addr // the Pod's IP
}

func newPodNetwork() (*podNetwork, error) {
	prefix, err := netip.ParsePrefix(podCIDR)
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, errors.New("iproute2's ip command is not installed")
	}
	return &podNetwork{prefix: prefix, used: map[int]bool{}}, nil
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
		return nil, fmt.Errorf("no free Pod address left in %s", podCIDR)
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
