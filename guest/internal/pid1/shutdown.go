package pid1

import (
	"bufio"
	"log/slog"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DisableCtrlAltDel makes the kernel send SIGINT to PID 1 on Ctrl-Alt-Del (Firecracker's
// SendCtrlAltDel) instead of rebooting at once, so the agent can stop the job first.
func DisableCtrlAltDel() error {
	return unix.Reboot(unix.LINUX_REBOOT_CMD_CAD_OFF)
}

// PowerOff ends the machine: every remaining process is killed, filesystems are synced and
// unmounted (lazily, innermost first), then reboot(2). mode "reboot" restarts (Firecracker with
// reboot=k exits on it); anything else powers off. Never returns.
func PowerOff(log *slog.Logger, mode string) {
	_ = syscall.Kill(-1, syscall.SIGTERM)
	time.Sleep(200 * time.Millisecond)
	_ = syscall.Kill(-1, syscall.SIGKILL)
	unix.Sync()
	for _, target := range mountTargetsInnermostFirst() {
		if target == "/" {
			continue
		}
		if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
			log.Debug("unmount failed", "target", target, "error", err)
		}
	}
	_ = unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY, "")
	unix.Sync()
	cmd := unix.LINUX_REBOOT_CMD_POWER_OFF
	if mode == "reboot" {
		cmd = unix.LINUX_REBOOT_CMD_RESTART
	}
	log.Info("powering off", "mode", mode)
	for {
		if err := unix.Reboot(cmd); err != nil {
			log.Error("reboot(2) failed", "error", err)
		}
		time.Sleep(time.Second)
	}
}

func mountTargetsInnermostFirst() []string {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return nil
	}
	defer f.Close()
	var targets []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 {
			targets = append(targets, unescapeMount(fields[1]))
		}
	}
	return innermostFirst(targets)
}

// innermostFirst orders mount targets (given in mount order) for unmounting: deeper paths before
// their parents, and among equals the later mount first (it may sit on top of an earlier one). Pure.
func innermostFirst(targets []string) []string {
	out := make([]string, len(targets))
	for i, t := range targets {
		out[len(targets)-1-i] = t
	}
	sort.SliceStable(out, func(i, j int) bool { return depth(out[i]) > depth(out[j]) })
	return out
}

func depth(path string) int {
	if path == "/" {
		return 0
	}
	return strings.Count(path, "/")
}

// unescapeMount undoes the octal escapes of /proc/self/mounts (\040 for space, etc.).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			v := (s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0')
			b.WriteByte(v)
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
