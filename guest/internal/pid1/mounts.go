package pid1

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Mount is one filesystem to mount. Pure data so the boot plan can be inspected and tested.
type Mount struct {
	Source, Target, FSType, Data string
	Flags                        uintptr
}

// mount makes the target directory if needed and mounts; an already-mounted target of the same type is fine.
func (m Mount) mount() error {
	if err := os.MkdirAll(m.Target, 0o755); err != nil {
		return fmt.Errorf("mkdir %s: %w", m.Target, err)
	}
	if err := unix.Mount(m.Source, m.Target, m.FSType, m.Flags, m.Data); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return nil
		}
		return fmt.Errorf("mount %s on %s: %w", m.FSType, m.Target, err)
	}
	return nil
}

const nodevExec = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC

// ProcMount is /proc with hidepid=invisible (Linux ≥ 5.8): a process sees only the /proc/<pid>
// entries of processes it could ptrace — its own uid's. So a job running as another uid cannot
// read the cmdline, environ or status of the agent or of root's execs. The agent (root) still sees all.
func ProcMount() Mount {
	return Mount{Source: "proc", Target: "/proc", FSType: "proc", Flags: nodevExec, Data: "hidepid=invisible"}
}

// EarlyMounts are needed before the overlay (to read the cmdline and see the scratch device).
func EarlyMounts() []Mount {
	return []Mount{
		ProcMount(),
		{Source: "devtmpfs", Target: "/dev", FSType: "devtmpfs", Flags: unix.MS_NOSUID, Data: "mode=0755"},
	}
}

// LateMounts are made in the final root.
func LateMounts() []Mount {
	return []Mount{
		{Source: "sysfs", Target: "/sys", FSType: "sysfs", Flags: nodevExec},
		{Source: "cgroup2", Target: "/sys/fs/cgroup", FSType: "cgroup2", Flags: nodevExec},
		{Source: "devpts", Target: "/dev/pts", FSType: "devpts", Flags: unix.MS_NOSUID | unix.MS_NOEXEC, Data: "gid=5,mode=0620,ptmxmode=0666"},
		{Source: "shm", Target: "/dev/shm", FSType: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: "mode=1777"},
		{Source: "run", Target: "/run", FSType: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: "mode=0755"},
		{Source: "tmp", Target: "/tmp", FSType: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: "mode=1777"},
	}
}

// MountAll mounts in order, stopping at the first failure.
func MountAll(mounts []Mount) error {
	for _, m := range mounts {
		if err := m.mount(); err != nil {
			return err
		}
	}
	return nil
}

// Paths used while assembling the overlay root.
const (
	stageDir     = "/run/imp"
	scratchDir   = stageDir + "/scratch"
	newRootDir   = stageDir + "/root"
	oldRootRel   = ".imp/oldroot"
	finalScratch = "/.imp/scratch"
)

// OverlayRoot makes the root an overlay: the current root (the image's base disk) read-only as
// lower, the host-formatted ext4 scratch device as upper/work; then pivots into it, carrying /dev
// and /proc along, and detaches the old root. Must run as PID 1 after EarlyMounts.
func OverlayRoot(scratchDev string) error {
	// The base must never change: the same image backs every VM.
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("remount / read-only: %w", err)
	}
	stage := []Mount{
		{Source: "imp-stage", Target: "/run", FSType: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: "mode=0755"},
		{Source: scratchDev, Target: scratchDir, FSType: "ext4", Flags: unix.MS_NOSUID | unix.MS_NODEV},
	}
	if err := MountAll(stage); err != nil {
		return err
	}
	for _, d := range []string{"upper", "work"} {
		if err := os.MkdirAll(filepath.Join(scratchDir, d), 0o755); err != nil {
			return fmt.Errorf("mkdir scratch %s: %w", d, err)
		}
	}
	overlay := Mount{
		Source: "overlay", Target: newRootDir, FSType: "overlay",
		Data: "lowerdir=/,upperdir=" + scratchDir + "/upper,workdir=" + scratchDir + "/work",
	}
	if err := overlay.mount(); err != nil {
		return err
	}
	for _, m := range []string{"/dev", "/proc"} {
		target := newRootDir + m
		if err := os.MkdirAll(target, 0o755); err != nil {
			return fmt.Errorf("mkdir %s: %w", target, err)
		}
		if err := unix.Mount(m, target, "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("move %s: %w", m, err)
		}
	}
	return pivot()
}

func pivot() error {
	oldRoot := filepath.Join(newRootDir, oldRootRel)
	if err := os.MkdirAll(oldRoot, 0o700); err != nil {
		return fmt.Errorf("mkdir %s: %w", oldRoot, err)
	}
	// pivot_root needs the new root to be a mount point not shared with the old root's peer group.
	if err := unix.Mount("", "/", "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	if err := unix.PivotRoot(newRootDir, oldRoot); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	old := "/" + oldRootRel
	if err := os.MkdirAll(finalScratch, 0o700); err != nil {
		return fmt.Errorf("mkdir %s: %w", finalScratch, err)
	}
	// Keep the scratch mount visible (for debugging and df); the overlay holds it either way.
	if err := unix.Mount(old+scratchDir, finalScratch, "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move scratch: %w", err)
	}
	if err := unix.Unmount(old, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	_ = os.Remove(old)
	// Shared propagation, as systemd makes it: a job's container runtime may ask for rshared or
	// rslave bind mounts (docker -v …:rshared, nested clusters), which need a shared parent.
	if err := unix.Mount("", "/", "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make / shared: %w", err)
	}
	return nil
}

// StorageDirs are the directories of container runtimes' image storage. Their layers are overlay
// mounts, which cannot stack on the overlay root (Docker would silently fall back to its vfs driver,
// a full copy per layer), so when the image has one of them it is bind-mounted from the scratch
// disk's ext4 itself; like every other write of the VM it lives and dies with the scratch disk.
var StorageDirs = []string{"/var/lib/docker", "/var/lib/containerd"}

// MountStorageDirs bind-mounts each of dirs that exists in the root from finalScratch/storage/,
// without the scratch mount's nosuid and nodev (container layers keep setuid binaries and device
// nodes). A directory the image does not have is left alone.
func MountStorageDirs(dirs []string) error {
	for _, dir := range dirs {
		info, err := os.Stat(dir)
		if err != nil || !info.IsDir() {
			continue
		}
		source := filepath.Join(finalScratch, "storage", filepath.Base(dir))
		if err := os.MkdirAll(source, 0o711); err != nil {
			return fmt.Errorf("mkdir %s: %w", source, err)
		}
		if err := unix.Mount(source, dir, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s on %s: %w", source, dir, err)
		}
		if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("remount %s with suid and devices: %w", dir, err)
		}
	}
	return nil
}
