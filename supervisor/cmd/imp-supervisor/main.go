// imp-supervisor is the parent of one VM process (a VMM or one of its helpers), started detached by
// the node agent so the process outlives an agent restart. See docs/supervisor.md.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"imp.dev/supervisor/internal/cgroup"
	"imp.dev/supervisor/internal/supervise"
)

func init() {
	// The process is started from the main goroutine, so its parent thread (what PR_SET_PDEATHSIG
	// watches) is the main thread, which exists until the supervisor exits.
	runtime.LockOSThread()
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == supervise.ExecArg {
		supervise.ExecChild(os.Args[2:])
	}
	if len(os.Args) < 2 || os.Args[1] != "run" {
		fmt.Fprintln(os.Stderr, "usage: imp-supervisor run --dir DIR --name NAME --vm-id ID [flags] -- BINARY [ARGS...]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	dir := fs.String("dir", "", "supervision directory (exists; holds sock, supervisor.json, exit.json)")
	name := fs.String("name", "", "the process's name (qemu, firecracker, ...)")
	vmID := fs.String("vm-id", "", "the VM's id")
	stdout := fs.String("stdout", "", "file the process's stdout is appended to")
	stderr := fs.String("stderr", "", "file the process's stderr is appended to")
	cwd := fs.String("cwd", "", "the process's working directory")
	cgRoot := fs.String("cgroup-root", "/sys/fs/cgroup", "where cgroup filesystems are mounted")
	cgParent := fs.String("cgroup-parent", "", "cgroup parent path for the VM cgroups; empty: no cgroup")
	memLimit := fs.Int64("memory-limit", 0, "memory limit of the process's cgroup in bytes; 0: none")
	grace := fs.Duration("stop-grace", 10*time.Second, "after SIGTERM to the supervisor, SIGKILL the process this much later")
	readyFd := fs.Int("ready-fd", -1, "file descriptor to report readiness on (one JSON line), then close")
	boundFile := fs.String("bound-file", "", "a file the process writes (its console log) whose size is bounded")
	boundBytes := fs.Int64("bound-bytes", 0, "kill the process once --bound-file is larger than this")
	_ = fs.Parse(os.Args[2:])
	rest := fs.Args()
	if *dir == "" || *name == "" || *vmID == "" || len(rest) == 0 {
		fmt.Fprintln(os.Stderr, "imp-supervisor: --dir, --name, --vm-id and a program are required")
		os.Exit(2)
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "imp-supervisor:", err)
		os.Exit(1)
	}
	cfg := supervise.Config{
		Dir: *dir, Name: *name, VMID: *vmID, Binary: rest[0], Args: rest[1:],
		Stdout: *stdout, Stderr: *stderr, Cwd: *cwd, StopGrace: *grace, Self: self,
		Logf: func(format string, args ...any) {
			msg := fmt.Sprintf(format, args...)
			fmt.Fprintf(os.Stderr, "%s imp-supervisor[%d] %s: %s\n", time.Now().UTC().Format(time.RFC3339Nano), os.Getpid(), *name, strings.TrimSpace(msg))
		},
	}
	if (*boundFile == "") != (*boundBytes <= 0) {
		fmt.Fprintln(os.Stderr, "imp-supervisor: --bound-file and a positive --bound-bytes go together")
		os.Exit(2)
	}
	if *boundFile != "" {
		cfg.Bound = &supervise.FileBound{Path: *boundFile, MaxBytes: *boundBytes}
	}
	if *cgParent != "" {
		cfg.Cgroup = &cgroup.Config{Root: *cgRoot, Parent: *cgParent, MemoryLimit: *memLimit}
	}
	if *readyFd >= 0 {
		cfg.Ready = os.NewFile(uintptr(*readyFd), "ready")
	}
	if err := supervise.Run(cfg); err != nil {
		cfg.Logf("%v", err)
		os.Exit(1)
	}
}
