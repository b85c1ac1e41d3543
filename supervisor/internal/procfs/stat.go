// Package procfs reads the few /proc facts the supervisor needs to name a process for good: a pid is
// reused by the kernel, so a process is identified by its pid together with its start time (field 22
// of /proc/<pid>/stat, clock ticks since boot) and the boot id.
package procfs

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Info is what /proc/<pid>/stat says about one process.
type Info struct {
	// State is the one-letter state (R, S, D, Z, ...); Z means exited but not yet reaped.
	State byte
	// StartTime is field 22: when the process started, in clock ticks since boot.
	StartTime uint64
}

// ParseStat parses the content of /proc/<pid>/stat. The command name (field 2) is in parentheses
// and may itself contain spaces and parentheses, so fields are counted from the last ')'.
func ParseStat(b []byte) (Info, error) {
	end := bytes.LastIndexByte(b, ')')
	if end < 0 {
		return Info{}, fmt.Errorf("no ')' in stat line")
	}
	fields := strings.Fields(string(b[end+1:]))
	// fields[0] is field 3 (state); field 22 (starttime) is fields[19].
	if len(fields) < 20 || len(fields[0]) != 1 {
		return Info{}, fmt.Errorf("stat line has %d fields after the command name, want at least 20", len(fields))
	}
	start, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return Info{}, fmt.Errorf("bad starttime %q: %w", fields[19], err)
	}
	return Info{State: fields[0][0], StartTime: start}, nil
}

// Stat reads /proc/<pid>/stat.
func Stat(pid int) (Info, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Info{}, err
	}
	return ParseStat(b)
}

// BootID is the kernel's random id of this boot; start times are only comparable within one boot.
func BootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
