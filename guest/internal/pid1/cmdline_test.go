package pid1

import (
	"strings"
	"testing"
)

func TestParseCmdlineFindsScratchAndKeepsQuotedValues(t *testing.T) {
	c := ParseCmdline(`console=ttyS0 ro init=/.imp/imp-guest imp.scratch=/dev/vdb quiet x="a b" imp.scratch=/dev/vdc` + "\n")
	if c.Scratch != "/dev/vdc" {
		t.Fatalf("scratch = %q (last one wins)", c.Scratch)
	}
	if c.Params["x"] != "a b" || c.Params["init"] != "/.imp/imp-guest" {
		t.Fatalf("params = %v", c.Params)
	}
	if _, ok := c.Params["quiet"]; !ok {
		t.Fatal("bare word missing")
	}
	if ParseCmdline("").Scratch != "" {
		t.Fatal("empty cmdline has a scratch")
	}
}

func TestUnescapeMountDecodesOctalEscapes(t *testing.T) {
	if got := unescapeMount(`/mnt/a\040b`); got != "/mnt/a b" {
		t.Fatalf("got %q", got)
	}
}

func TestBootMountPlanCoversEveryRequiredFilesystem(t *testing.T) {
	want := map[string]string{
		"/proc": "proc", "/dev": "devtmpfs", "/sys": "sysfs", "/sys/fs/cgroup": "cgroup2",
		"/dev/pts": "devpts", "/dev/shm": "tmpfs", "/run": "tmpfs", "/tmp": "tmpfs",
	}
	got := map[string]string{}
	for _, m := range append(EarlyMounts(), LateMounts()...) {
		got[m.Target] = m.FSType
	}
	if m := EarlyMounts()[0]; m.Target != "/proc" || m.Data != "hidepid=invisible" {
		t.Fatalf("/proc must hide other uids' processes: %+v", m)
	}
	for target, fs := range want {
		if got[target] != fs {
			t.Fatalf("%s: got %q, want %q", target, got[target], fs)
		}
	}
}

func TestInnermostFirstUnmountsChildrenAndLaterMountsFirst(t *testing.T) {
	got := innermostFirst([]string{"/", "/proc", "/dev", "/dev/pts", "/run", "/run", "/sys", "/sys/fs/cgroup"})
	want := []string{"/sys/fs/cgroup", "/dev/pts", "/sys", "/run", "/run", "/dev", "/proc", "/"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestShutdownModeFollowsTheKernelRebootMethod(t *testing.T) {
	cases := map[string]string{
		"console=ttyS0 reboot=k panic=1 pci=off init=/.imp/imp-guest": "reboot", // Firecracker
		"console=ttyS0 reboot=t,s":                                    "reboot",
		"console=ttyS0 panic=-1 ro root=/dev/vda":                     "poweroff", // QEMU tests
		"console=ttyS0 reboot= quiet":                                 "poweroff",
		"":                                                            "poweroff",
	}
	for text, want := range cases {
		if got := ParseCmdline(text).ShutdownMode(); got != want {
			t.Errorf("%q: got %s, want %s", text, got, want)
		}
	}
}
