package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// podExec is the `pod-exec` subcommand: the step between the pod runner and
// a container's process, as a container runtime's shim. It joins the Pod's
// network namespace, gives the process a UTS namespace of its own whose
// hostname is the Pod's name (what `hostname` and os.Hostname() answer in a
// real Pod), and replaces itself with the container's program.
//
//	cluster pod-exec <network namespace> <hostname> <program> [args...]
//
// Namespaces belong to threads: the thread is locked, joined and unshared,
// and execve(2) is called from it, so the new program starts inside.
func podExec(args []string) error {
	if len(args) < 3 {
		return errors.New("usage: cluster pod-exec <network namespace> <hostname> <program> [args...]")
	}
	netns, hostname, program := args[0], args[1], args[2]
	runtime.LockOSThread()
	fd, err := unix.Open(filepath.Join("/run/netns", netns), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open network namespace %q: %w", netns, err)
	}
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("join network namespace %q: %w", netns, err)
	}
	_ = unix.Close(fd)
	if err := unix.Unshare(unix.CLONE_NEWUTS); err != nil {
		return fmt.Errorf("new UTS namespace: %w", err)
	}
	if err := unix.Sethostname([]byte(hostname)); err != nil {
		return fmt.Errorf("set hostname %q: %w", hostname, err)
	}
	argv := append([]string{filepath.Base(program)}, args[3:]...)
	return syscall.Exec(program, argv, os.Environ())
}
