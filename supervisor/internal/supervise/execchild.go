package supervise

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// ExecArg is argv[1] of the supervisor re-executed as the process's first stage.
const ExecArg = "__exec"

// execErrFd is the pipe on which the first stage reports why it could not exec. It is close-on-exec,
// so a successful exec shows as EOF with nothing written.
const execErrFd = 3

// ExecChild is the first stage of the supervised process, run as `imp-supervisor __exec <procs-file|-> <binary> <args...>`:
// it joins the cgroup by writing its own pid to procs-file, then execs the binary. Joining before
// exec means every page the program ever touches is charged to the cgroup. It never returns.
func ExecChild(args []string) {
	fail := func(format string, a ...any) {
		msg := fmt.Sprintf(format, a...)
		_, _ = os.NewFile(execErrFd, "exec-err").WriteString(msg)
		fmt.Fprintln(os.Stderr, "imp-supervisor:", msg)
		os.Exit(127)
	}
	syscall.CloseOnExec(execErrFd)
	if len(args) < 2 {
		fail("__exec needs a cgroup.procs path and a binary")
	}
	if args[0] != "-" {
		if err := os.WriteFile(args[0], []byte(fmt.Sprint(os.Getpid())), 0); err != nil {
			fail("cannot join cgroup: %v", err)
		}
	}
	bin, err := exec.LookPath(args[1])
	if err != nil {
		fail("cannot find %s: %v", args[1], err)
	}
	err = syscall.Exec(bin, args[1:], os.Environ())
	fail("cannot exec %s: %v", bin, err)
}
