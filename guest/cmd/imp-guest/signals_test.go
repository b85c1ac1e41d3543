package main

import (
	"io"
	"log/slog"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"testing"
)

func TestCatchFatalSignalsLeavesExecsWithDefaultDispositions(t *testing.T) {
	catchFatalSignals(slog.New(slog.NewTextHandler(io.Discard, nil)))
	// Started the way execmgr starts execs (fork+execve from this process).
	out, err := exec.Command("/bin/cat", "/proc/self/status").Output()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^SigIgn:\s*([0-9a-f]+)$`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no SigIgn in\n%s", out)
	}
	ignored, err := strconv.ParseUint(string(m[1]), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range fatalSignals {
		if bit := uint64(1) << (uint(sig.(syscall.Signal)) - 1); ignored&bit != 0 {
			t.Errorf("the child inherited %v as ignored (SigIgn %s)", sig, m[1])
		}
	}
	// The agent itself still survives them: a handled signal does not end the process.
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
}
