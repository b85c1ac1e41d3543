package pid1

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

func TestWorkloadLimitsGiveTheHostedRunnersOpenFileLimit(t *testing.T) {
	limits := WorkloadLimits()
	if len(limits) != 1 || limits[0].Resource != unix.RLIMIT_NOFILE || limits[0].Value < 65536 {
		t.Fatalf("limits = %+v", limits)
	}
}

func TestSetLimitsRaisesSoftAndHard(t *testing.T) {
	if err := SetLimits(WorkloadLimits()); err != nil {
		if errors.Is(err, unix.EPERM) {
			t.Skipf("cannot raise the hard limit here (no CAP_SYS_RESOURCE in this sandbox): %v; PID 1 in a VM can, and test/e2e/guest-vm.test.ts checks it there", err)
		}
		t.Fatal(err)
	}
	var got unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &got); err != nil || got.Cur != 65536 || got.Max != 65536 {
		t.Fatalf("RLIMIT_NOFILE = %+v, %v", got, err)
	}
}
