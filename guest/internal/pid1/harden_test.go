package pid1

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// capBnd reads this process's capability bounding set from /proc/self/status.
func capBnd(t *testing.T) uint64 {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
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

// Harden changes the calling process for good, and needs a binary without cgo (as the guest agent
// is built), so it runs in a probe built here with CGO_ENABLED=0, whatever this test binary is.
func TestHardenDropsPtraceFromEveryChildAndMakesTheAgentNonDumpable(t *testing.T) {
	if os.Geteuid() != 0 || capBnd(t)&(1<<unix.CAP_SYS_PTRACE) == 0 {
		t.Skip("needs root with CAP_SYS_PTRACE in the bounding set (it is what Harden drops)")
	}
	probe := filepath.Join(t.TempDir(), "hardenprobe")
	build := exec.Command("go", "build", "-o", probe, "./testdata/hardenprobe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the probe: %v\n%s", err, out)
	}
	out, err := exec.Command(probe).CombinedOutput()
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	var dumpable int
	var child string
	if _, err := fmt.Sscanf(string(out), "dumpable=%d child=%s", &dumpable, &child); err != nil {
		t.Fatalf("probe said %q: %v", out, err)
	}
	if dumpable != 0 {
		t.Errorf("the agent is still dumpable (%d)", dumpable)
	}
	n, err := strconv.ParseUint(child, 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	if n&(1<<unix.CAP_SYS_PTRACE) != 0 {
		t.Errorf("a child still has CAP_SYS_PTRACE in its bounding set: %x", n)
	}
	if n != capBnd(t)&^(1<<unix.CAP_SYS_PTRACE) {
		t.Errorf("a child lost more than CAP_SYS_PTRACE: %x (this test's: %x)", n, capBnd(t))
	}
}
