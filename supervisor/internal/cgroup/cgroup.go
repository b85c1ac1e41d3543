// Package cgroup gives one supervised process its own memory cgroup, so the guest's memory is charged
// (and limited) there rather than to whoever started the supervisor. Two layouts are supported:
// cgroup v2 mounted at the root (memory.max), and cgroup v1 with the memory controller mounted at
// <root>/memory (memory.limit_in_bytes, memory.memsw.limit_in_bytes when swap accounting is on). On a
// hybrid host whose v2 mount lacks the memory controller, v1 memory is used.
//
// The cgroup is <mount>/<parent>/<group>/<leaf>: group is the VM's id (so a sweep can map cgroups to
// VMs by name), leaf the process's name. The group directory holds no processes and no limit; whoever
// removes the last leaf removes it.
package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Mode names the cgroup layout in use.
type Mode string

const (
	V1Memory Mode = "v1-memory"
	V2       Mode = "v2"
)

// Config says where the cgroup goes and what it may use.
type Config struct {
	// Root is where cgroup filesystems are mounted, normally /sys/fs/cgroup.
	Root string
	// Parent is a relative path under the memory hierarchy shared by all of one agent's VMs ("imp").
	Parent string
	// Group is the VM's id, Leaf the process's name.
	Group, Leaf string
	// MemoryLimit in bytes; 0 means no limit.
	MemoryLimit int64
}

// Cgroup is one created leaf cgroup.
type Cgroup struct {
	Mode Mode
	// Path is the leaf's directory; GroupPath its parent (the VM's directory).
	Path, GroupPath string
}

var component = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)

func validComponent(s string) bool { return component.MatchString(s) && s != "." && s != ".." }

// Validate rejects names that could escape the parent or are not plain directory names.
func (c Config) Validate() error {
	if c.Root == "" || !filepath.IsAbs(c.Root) {
		return fmt.Errorf("cgroup root %q is not an absolute path", c.Root)
	}
	for _, p := range strings.Split(c.Parent, "/") {
		if !validComponent(p) {
			return fmt.Errorf("cgroup parent %q: component %q is not a plain name", c.Parent, p)
		}
	}
	if !validComponent(c.Group) || !validComponent(c.Leaf) {
		return fmt.Errorf("cgroup group %q or leaf %q is not a plain name", c.Group, c.Leaf)
	}
	if c.MemoryLimit < 0 {
		return fmt.Errorf("memory limit %d is negative", c.MemoryLimit)
	}
	return nil
}

// Detect picks the layout: pure v2 when the root is a v2 mount offering the memory controller, else
// v1 when the memory controller is mounted at <root>/memory.
func Detect(root string) (Mode, string, error) {
	if b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers")); err == nil {
		for _, c := range strings.Fields(string(b)) {
			if c == "memory" {
				return V2, root, nil
			}
		}
	}
	v1 := filepath.Join(root, "memory")
	if _, err := os.Stat(filepath.Join(v1, "memory.limit_in_bytes")); err == nil {
		return V1Memory, v1, nil
	}
	return "", "", fmt.Errorf("no memory cgroup controller under %s (neither a v2 mount with memory nor v1 at %s)", root, v1)
}

// Create makes the leaf cgroup and sets its limit. A leftover leaf with no processes (from a
// supervisor that was killed) is reused; one that still holds processes is refused.
func Create(cfg Config) (*Cgroup, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	mode, mount, err := Detect(cfg.Root)
	if err != nil {
		return nil, err
	}
	group := filepath.Join(mount, cfg.Parent, cfg.Group)
	cg := &Cgroup{Mode: mode, Path: filepath.Join(group, cfg.Leaf), GroupPath: group}
	// Another supervisor of the same VM may remove the group directory between our MkdirAll and
	// Mkdir (it just removed the last leaf); that shows as ENOENT, and trying again settles it.
	for attempt := 0; ; attempt++ {
		if mode == V2 {
			err = enableMemory(mount, filepath.Join(cfg.Parent, cfg.Group))
		} else {
			err = os.MkdirAll(group, 0o755)
		}
		if err == nil {
			err = os.Mkdir(cg.Path, 0o755)
		}
		if err == nil || !errors.Is(err, os.ErrNotExist) || attempt == 5 {
			break
		}
	}
	if errors.Is(err, os.ErrExist) {
		pids, perr := cg.Pids()
		if perr != nil {
			return nil, perr
		}
		if len(pids) > 0 {
			return nil, fmt.Errorf("cgroup %s already exists and holds processes %v", cg.Path, pids)
		}
		err = nil
	}
	if err != nil {
		return nil, err
	}
	if err := cg.setLimit(cfg.MemoryLimit); err != nil {
		_ = cg.Remove()
		return nil, err
	}
	return cg, nil
}

// enableMemory creates each directory of rel under mount and turns the memory controller on for its
// children, as v2 requires of every ancestor of a cgroup that uses it.
func enableMemory(mount, rel string) error {
	dir := mount
	for _, part := range strings.Split(rel, "/") {
		if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+memory"); err != nil {
			return fmt.Errorf("enable memory controller in %s: %w", dir, err)
		}
		dir = filepath.Join(dir, part)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+memory"); err != nil {
		return fmt.Errorf("enable memory controller in %s: %w", dir, err)
	}
	return nil
}

func (c *Cgroup) setLimit(limit int64) error {
	if limit == 0 {
		return nil
	}
	value := strconv.FormatInt(limit, 10)
	if c.Mode == V2 {
		return writeFile(filepath.Join(c.Path, "memory.max"), value)
	}
	if err := writeFile(filepath.Join(c.Path, "memory.limit_in_bytes"), value); err != nil {
		return err
	}
	// Without this the process could push the rest of its memory to swap past the limit.
	memsw := filepath.Join(c.Path, "memory.memsw.limit_in_bytes")
	if _, err := os.Stat(memsw); err == nil {
		return writeFile(memsw, value)
	}
	return nil
}

// OOMKills is how many processes the kernel's OOM killer ended in this cgroup: v2's memory.events
// "oom_kill", v1's memory.oom_control "oom_kill" (Linux 4.13+).
func (c *Cgroup) OOMKills() (int64, error) {
	file := "memory.oom_control"
	if c.Mode == V2 {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(c.Path, file))
	if err != nil {
		return 0, err
	}
	return keyedValue(string(b), "oom_kill")
}

// PeakBytes is the most memory the cgroup has held (v2 memory.peak, Linux 5.19+; v1
// memory.max_usage_in_bytes); 0 when the kernel does not say.
func (c *Cgroup) PeakBytes() int64 {
	file := "memory.max_usage_in_bytes"
	if c.Mode == V2 {
		file = "memory.peak"
	}
	return readInt(filepath.Join(c.Path, file))
}

// LimitBytes is the cgroup's memory limit; 0 when it has none (v2 "max") or the kernel does not say.
func (c *Cgroup) LimitBytes() int64 {
	file := "memory.limit_in_bytes"
	if c.Mode == V2 {
		file = "memory.max"
	}
	return readInt(filepath.Join(c.Path, file))
}

// keyedValue finds "key N" in a flat keyed file (memory.events, memory.oom_control).
func keyedValue(text, key string) (int64, error) {
	for _, line := range strings.Split(text, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 2 && fields[0] == key {
			return strconv.ParseInt(fields[1], 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in %q", key, text)
}

func readInt(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	// v2 says "max" and v1 a page-rounded 2^63 for "no limit".
	if err != nil || n >= 1<<62 {
		return 0
	}
	return n
}

// ProcsFile is the file a process writes its pid to in order to join the cgroup.
func (c *Cgroup) ProcsFile() string { return filepath.Join(c.Path, "cgroup.procs") }

// Pids lists the processes in the cgroup.
func (c *Cgroup) Pids() ([]int, error) {
	b, err := os.ReadFile(c.ProcsFile())
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("bad pid %q in %s", f, c.ProcsFile())
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// KillAll SIGKILLs every process left in the cgroup (children the VMM may have started) and waits,
// up to timeout, until it is empty.
func (c *Cgroup) KillAll(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	if c.Mode == V2 {
		// cgroup.kill (Linux 5.14+) kills atomically, so nothing can fork its way out of the loop below.
		_ = writeFile(filepath.Join(c.Path, "cgroup.kill"), "1")
	}
	for {
		pids, err := c.Pids()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still holds %v after %v", c.Path, pids, timeout)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Remove deletes the leaf, then the group directory if no other leaf is left in it. A cgroup whose
// last process has just died may stay busy for a moment, hence the short retry.
func (c *Cgroup) Remove() error {
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		err = syscall.Rmdir(c.Path)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			err = nil
			break
		}
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("remove cgroup %s: %w", c.Path, err)
	}
	// EBUSY/ENOTEMPTY: another process of the same VM still has its leaf here; it will remove the group.
	if gerr := syscall.Rmdir(c.GroupPath); gerr != nil && !errors.Is(gerr, syscall.ENOENT) &&
		!errors.Is(gerr, syscall.EBUSY) && !errors.Is(gerr, syscall.ENOTEMPTY) {
		return fmt.Errorf("remove cgroup %s: %w", c.GroupPath, gerr)
	}
	return nil
}

func writeFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(value)
	cerr := f.Close()
	if werr != nil {
		return fmt.Errorf("write %q to %s: %w", value, path, werr)
	}
	return cerr
}

// Escape moves the calling process to the root cgroup of every hierarchy mounted under root (each
// cgroup v1 controller directory and a v2 mount, at root itself or at <root>/unified), and returns
// the cgroup.procs files it wrote.
//
// The supervisor plays the part containerd's shim plays for containers: it must outlive whoever
// started it. An agent in a Pod starts supervisors from inside its container's cgroups, and a
// container runtime stopping a container that shares the host's PID namespace (hostPID) kills every
// process still in the container's cgroup (runc reads the v1 devices hierarchy, or the v2 cgroup).
// Out of those cgroups, the VMM under this supervisor keeps running across an agent Pod's restart,
// upgrade or eviction, and the next agent Pod adopts it. The supervised process then joins its own
// memory leaf (Create); in every other hierarchy it stays at the root, where nothing limits it.
func Escape(root string) ([]string, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	candidates := []string{filepath.Join(root, "cgroup.procs")}
	for _, e := range entries {
		// Symlinks (cpu -> cpu,cpuacct) name a hierarchy already listed under its real directory.
		if e.IsDir() && e.Type()&os.ModeSymlink == 0 {
			candidates = append(candidates, filepath.Join(root, e.Name(), "cgroup.procs"))
		}
	}
	pid := strconv.Itoa(os.Getpid())
	var moved []string
	var errs []error
	for _, procs := range candidates {
		if _, err := os.Stat(procs); err != nil {
			continue
		}
		if err := writeFile(procs, pid); err != nil {
			errs = append(errs, err)
			continue
		}
		moved = append(moved, procs)
	}
	return moved, errors.Join(errs...)
}
