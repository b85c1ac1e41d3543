package pid1

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// capBnd reads a process's capability bounding set from /proc/<pid>/status.
func capBnd(t *testing.T, pid string) uint64 {
	t.Helper()
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no CapBnd line")
	return 0
}

// Harden changes the calling process for good, so it runs in a child process of the test binary.
func TestHardenDropsPtraceFromEveryChildAndMakesTheAgentNonDumpable(t *testing.T) {
	if os.Getenv("IMP_HARDEN_CHILD") == "1" {
		if err := Harden(); err != nil {
			t.Fatal(err)
		}
		if d, _ := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); d != 0 {
			t.Fatalf("still dumpable (%d)", d)
		}
		out, err := exec.Command("/bin/sh", "-c", "grep CapBnd /proc/self/status").Output()
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(string(out), "CapBnd:")), 16, 64)
		if n&(1<<unix.CAP_SYS_PTRACE) != 0 {
			t.Fatalf("a child still has CAP_SYS_PTRACE in its bounding set: %x", n)
		}
		if n == 0 {
			t.Fatal("a child lost every capability, not only CAP_SYS_PTRACE")
		}
		return
	}
	if os.Geteuid() != 0 || capBnd(t, "self")&(1<<unix.CAP_SYS_PTRACE) == 0 {
		t.Skip("needs root with CAP_SYS_PTRACE in the bounding set (it is what Harden drops)")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHardenDropsPtraceFromEveryChildAndMakesTheAgentNonDumpable$", "-test.v")
	cmd.Env = append(os.Environ(), "IMP_HARDEN_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}
