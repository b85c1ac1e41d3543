package pid1

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// Harden keeps the workload out of PID 1's memory, where the exit record key lives
// (docs/guest-protocol.md, "Exit records"): PID 1 becomes non-dumpable, so ptrace, /proc/1/mem,
// /proc/1/environ and process_vm_readv on it need CAP_SYS_PTRACE; and CAP_SYS_PTRACE leaves the
// capability bounding set of every thread, which every process PID 1 starts inherits and can never
// regain (not through setuid root, sudo or a privileged container). Jobs keep ptrace over their
// own processes (debuggers, strace, sanitizers), which needs no capability.
func Harden() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_DUMPABLE: %w", err)
	}
	// The bounding set is per thread and a child inherits the forking thread's: drop it in all of
	// them (the Go runtime forks from any thread). Needs a binary without cgo, which the agent is.
	if _, _, errno := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_CAPBSET_DROP, unix.CAP_SYS_PTRACE, 0); errno != 0 {
		return fmt.Errorf("PR_CAPBSET_DROP CAP_SYS_PTRACE: %w", errno)
	}
	return nil
}
