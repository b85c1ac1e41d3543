package pid1

import (
	"fmt"
	"log/slog"
	"os"

	"golang.org/x/sys/unix"
)

// Boot runs the PID-1 setup: early mounts, the overlay root (when imp.scratch is given), the
// remaining mounts, /dev's standard links, a default hostname and loopback. It returns the parsed kernel command line.
// loUp is injected so this package does not depend on netlink.
func Boot(log *slog.Logger, loUp func() error) (Cmdline, error) {
	var cmdline Cmdline
	steps := []Step{
		{Name: "mount.early", Run: func() error { return MountAll(EarlyMounts()) }},
		{Name: "cmdline", Run: func() error {
			text, err := os.ReadFile("/proc/cmdline")
			if err != nil {
				return err
			}
			cmdline = ParseCmdline(string(text))
			return nil
		}},
		{Name: "ctrl-alt-del.off", Run: DisableCtrlAltDel},
		{Name: "harden", Run: Harden},
		{Name: "limits", Run: func() error { return SetLimits(WorkloadLimits()) }},
		{Name: "root.overlay", Run: func() error {
			if cmdline.Scratch == "" {
				log.Warn("no imp.scratch on the kernel command line; running on the plain root")
				return nil
			}
			return OverlayRoot(cmdline.Scratch)
		}},
		{Name: "mount.late", Run: func() error { return MountAll(LateMounts()) }},
		{Name: "dev.links", Run: func() error { return MakeDevLinks("/", DevLinks()) }},
		{Name: "mount.storage", Run: func() error {
			if cmdline.Scratch == "" {
				return nil // no scratch disk: nothing to put the storage on
			}
			return MountStorageDirs(StorageDirs)
		}},
		{Name: "mount.cache", Run: func() error {
			if cmdline.CacheDevice() == "" {
				return nil
			}
			paths, err := cmdline.CachePaths()
			if err != nil {
				log.Warn("cache paths", "error", err)
			}
			MountCache(log, cmdline.CacheDevice(), paths)
			return nil
		}},
		{Name: "hostname.default", Run: func() error { return unix.Sethostname([]byte("imp")) }},
		{Name: "loopback.up", Run: loUp},
		{Name: "env.path", Run: func() error {
			// The kernel gives init almost no environment; the agent's own lookups need PATH.
			if os.Getenv("PATH") == "" {
				return os.Setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
			}
			return nil
		}},
	}
	if err := RunSteps(log, steps); err != nil {
		return cmdline, fmt.Errorf("cannot boot the guest: %w", err)
	}
	return cmdline, nil
}
