package pid1

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Limit is one resource limit PID 1 sets for itself, so every process of the VM inherits it.
type Limit struct {
	Name     string
	Resource int
	Value    uint64
}

// WorkloadLimits are what a job expects of a hosted runner: `ulimit -n` is 65536 there (soft and
// hard), and build tools (webpack, Gradle, many test runners) open more files than the kernel's
// default of 1024 for PID 1. The VM is the job's own, so its limits are the job's to use.
func WorkloadLimits() []Limit {
	return []Limit{{Name: "nofile", Resource: unix.RLIMIT_NOFILE, Value: 65536}}
}

// SetLimits sets each limit (soft and hard) on this process.
func SetLimits(limits []Limit) error {
	for _, l := range limits {
		if err := unix.Setrlimit(l.Resource, &unix.Rlimit{Cur: l.Value, Max: l.Value}); err != nil {
			return fmt.Errorf("rlimit %s %d: %w", l.Name, l.Value, err)
		}
	}
	return nil
}
