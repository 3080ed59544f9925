package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// podExec is the `pod-exec` subcommand: the step between the pod runner and
// a container's process, as a container runtime's shim. It joins the Pod's
// network namespace, gives the process a UTS namespace of its own whose
// hostname is the Pod's name (what `hostname` and os.Hostname() answer in a
// real Pod), makes the container's volume mounts in a mount namespace of its
// own (with --mounts), and replaces itself with the container's program.
//
//	cluster pod-exec [--mounts <file>] <network namespace> <hostname> <program> [args...]
//
// Namespaces belong to threads: the thread is locked, joined and unshared,
// and execve(2) is called from it, so the new program starts inside.
func podExec(args []string) error {
	var mountsFile string
	if len(args) >= 2 && args[0] == "--mounts" {
		mountsFile, args = args[1], args[2:]
	}
	if len(args) < 3 {
		return errors.New("usage: cluster pod-exec [--mounts <file>] <network namespace> <hostname> <program> [args...]")
	}
	netns, hostname, program := args[0], args[1], args[2]
	var spec mountSpec
	if mountsFile != "" {
		data, err := os.ReadFile(mountsFile)
		if err != nil {
			return fmt.Errorf("read mounts: %w", err)
		}
		if err := json.Unmarshal(data, &spec); err != nil {
			return fmt.Errorf("read mounts %q: %w", mountsFile, err)
		}
	}
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
	path := program
	if len(spec.Mounts) > 0 {
		// The program is opened before the mounts, which may hide it (an
		// image built under /root/.cache with a volume mounted at /root),
		// and executed through its descriptor.
		prog, err := unix.Open(program, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open program %q: %w", program, err)
		}
		if err := mountVolumes(spec); err != nil {
			return err
		}
		path = "/proc/self/fd/" + strconv.Itoa(prog)
	}
	argv := append([]string{filepath.Base(program)}, args[3:]...)
	return syscall.Exec(path, argv, os.Environ())
}

// mountSpec is what the pod runner hands pod-exec in its --mounts file.
type mountSpec struct {
	Mounts []podMount `json:"mounts"`
	// Scratch is a directory of the Pod's where mount points that do not
	// exist on the machine are made (the upper layers of overlays).
	Scratch string `json:"scratch"`
}

// mountVolumes gives the calling thread a mount namespace of its own, in
// which nothing propagates back to the machine's, and bind-mounts each
// volume at its target there.
//
// A target that does not exist on the machine (/etc/secret-volume) needs a
// mount point, which must not be created on the machine's file system: its
// nearest existing parent (/etc) is covered, in this namespace only, by an
// overlay whose upper layer is a scratch directory of the Pod's, and the
// mount point is made in that layer. A target whose parent is the root
// directory cannot be made that way and is refused.
func mountVolumes(spec mountSpec) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("new mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := detachNetworkNamespaces(); err != nil {
		return err
	}
	overlays := map[string]bool{}
	for i, m := range spec.Mounts {
		info, err := os.Stat(m.Source)
		if err != nil {
			return fmt.Errorf("volume source for %q: %w", m.Target, err)
		}
		if _, err := os.Lstat(m.Target); errors.Is(err, os.ErrNotExist) {
			if err := makeMountPoint(m.Target, info.IsDir(), filepath.Join(spec.Scratch, strconv.Itoa(i)), overlays); err != nil {
				return err
			}
		} else if err != nil {
			return fmt.Errorf("mount point %q: %w", m.Target, err)
		}
		if err := unix.Mount(m.Source, m.Target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind-mount %q at %q: %w", m.Source, m.Target, err)
		}
		if m.ReadOnly {
			flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY)
			if err := unix.Mount("", m.Target, "", flags, ""); err != nil {
				return fmt.Errorf("make %q read-only: %w", m.Target, err)
			}
		}
	}
	return nil
}

// detachNetworkNamespaces unmounts, in this mount namespace only, the
// network namespaces pinned under /run/netns: a copy of such a mount would
// keep another Pod's namespace (and its veth, whose address is reused by a
// later Pod) alive for as long as this process runs.
func detachNetworkNamespaces() error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	var targets []string
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		// id parent major:minor root mountpoint options... - fstype source superoptions
		fields := strings.Fields(scanner.Text())
		sep := -1
		for i, field := range fields {
			if field == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		if fields[sep+1] == "nsfs" {
			targets = append(targets, unescapeMountPath(fields[4]))
		}
	}
	if err := scanner.Err(); err != nil {
		return err
	}
	for _, t := range targets {
		if err := unix.Unmount(t, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("detach %q: %w", t, err)
		}
	}
	return nil
}

// unescapeMountPath undoes mountinfo's octal escapes (`\040` for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// makeMountPoint creates target (a directory, or an empty file for a file
// mount) inside an overlay on its nearest existing parent directory.
func makeMountPoint(target string, dir bool, scratch string, overlays map[string]bool) error {
	parent := filepath.Dir(target)
	for {
		if _, err := os.Stat(parent); err == nil {
			break
		}
		parent = filepath.Dir(parent)
	}
	resolved, err := filepath.EvalSymlinks(parent)
	if err != nil {
		return fmt.Errorf("mount point %q: %w", target, err)
	}
	if resolved == "/" {
		return fmt.Errorf("cannot make mount point %q: the pod runner cannot add a directory at the root of the file system; mount the volume at an existing path or below one", target)
	}
	if !overlays[resolved] {
		upper, work := filepath.Join(scratch, "upper"), filepath.Join(scratch, "work")
		if err := os.RemoveAll(scratch); err != nil {
			return err
		}
		for _, d := range []string{upper, work} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		options := "lowerdir=" + escapeOverlayPath(resolved) + ",upperdir=" + escapeOverlayPath(upper) + ",workdir=" + escapeOverlayPath(work)
		if err := unix.Mount("overlay", resolved, "overlay", 0, options); err != nil {
			return fmt.Errorf("cannot make mount point %q: overlay on %q: %w", target, resolved, err)
		}
		overlays[resolved] = true
	}
	if dir {
		return os.MkdirAll(target, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// escapeOverlayPath escapes the characters overlayfs options treat as
// separators.
func escapeOverlayPath(p string) string {
	return strings.NewReplacer(`\`, `\\`, `,`, `\,`, `:`, `\:`).Replace(p)
}
