// Package pid1 does what only the init process does: early mounts, the overlay root, and the
// final sync/unmount/power-off. It is skipped entirely when the agent runs as an ordinary process.
package pid1

import (
	"os"
	"strings"
)

// Cmdline holds the kernel parameters the agent reads.
type Cmdline struct {
	// Scratch is the block device holding the host-made ext4 scratch filesystem ("" = no overlay).
	Scratch string
	// Params are all key=value parameters, last one wins.
	Params map[string]string
}

// ParseCmdline parses /proc/cmdline text. Quoted values ("a b") are kept whole. Pure.
func ParseCmdline(text string) Cmdline {
	c := Cmdline{Params: map[string]string{}}
	for _, field := range splitCmdline(text) {
		key, value, ok := strings.Cut(field, "=")
		if !ok {
			c.Params[field] = ""
			continue
		}
		c.Params[key] = strings.Trim(value, `"`)
	}
	c.Scratch = c.Params["imp.scratch"]
	return c
}

func splitCmdline(text string) []string {
	var fields []string
	var cur strings.Builder
	quoted := false
	for _, r := range strings.TrimSpace(text) {
		switch {
		case r == '"':
			quoted = !quoted
			cur.WriteRune(r)
		case (r == ' ' || r == '\n' || r == '\t') && !quoted:
			if cur.Len() > 0 {
				fields = append(fields, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		fields = append(fields, cur.String())
	}
	return fields
}

// ShutdownMode is how to end the machine when the host did not say (boot failure, SIGTERM,
// Ctrl-Alt-Del): "reboot" when the kernel was given a reboot method (`reboot=k` etc.), else
// "poweroff". Firecracker, booted with `reboot=k`, has no power-off device and exits only when the
// guest reboots; QEMU runs with -no-reboot and exits on either. Pure.
func (c Cmdline) ShutdownMode() string {
	if c.Params["reboot"] != "" {
		return "reboot"
	}
	return "poweroff"
}

// ReadCmdline reads /proc/cmdline, mounting /proc first if it is not there yet (a boot that failed
// early). Best effort: an unreadable command line parses as empty.
func ReadCmdline() Cmdline {
	text, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		_ = ProcMount().mount()
		text, _ = os.ReadFile("/proc/cmdline")
	}
	return ParseCmdline(string(text))
}
