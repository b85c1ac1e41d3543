package cgroup

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestValidateRejectsNamesThatAreNotPlainComponents(t *testing.T) {
	good := Config{Root: "/sys/fs/cgroup", Parent: "imp/vms", Group: "vm-1", Leaf: "qemu"}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Config{
		{Root: "relative", Parent: "imp", Group: "g", Leaf: "l"},
		{Root: "/r", Parent: "imp/../..", Group: "g", Leaf: "l"},
		{Root: "/r", Parent: "", Group: "g", Leaf: "l"},
		{Root: "/r", Parent: "imp", Group: "..", Leaf: "l"},
		{Root: "/r", Parent: "imp", Group: "g", Leaf: "a/b"},
		{Root: "/r", Parent: "imp", Group: "g", Leaf: "l", MemoryLimit: -1},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v) succeeded", bad)
		}
	}
}

func TestDetectPrefersV2OnlyWhenItOffersMemory(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpu io hugetlb\n"), 0o644))
	if _, _, err := Detect(root); err == nil {
		t.Fatal("Detect found a memory controller where there is none")
	}
	must(os.MkdirAll(filepath.Join(root, "memory"), 0o755))
	must(os.WriteFile(filepath.Join(root, "memory", "memory.limit_in_bytes"), nil, 0o644))
	if mode, mount, err := Detect(root); err != nil || mode != V1Memory || mount != filepath.Join(root, "memory") {
		t.Fatalf("hybrid: Detect = %v %v %v, want v1-memory", mode, mount, err)
	}
	must(os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpu memory io\n"), 0o644))
	if mode, mount, err := Detect(root); err != nil || mode != V2 || mount != root {
		t.Fatalf("v2: Detect = %v %v %v, want v2", mode, mount, err)
	}
}

// On the real cgroup filesystem of this machine: the limit is set, a process can join, KillAll
// empties the cgroup and Remove leaves nothing, including the VM's group directory.
func TestCreateLimitKillRemoveOnThisMachine(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	if _, _, err := Detect("/sys/fs/cgroup"); err != nil {
		t.Skipf("no memory cgroup here: %v", err)
	}
	parent := fmt.Sprintf("imp-gotest-%d", os.Getpid())
	cfg := Config{Root: "/sys/fs/cgroup", Parent: parent, Group: "vm-1", Leaf: "vmm", MemoryLimit: 64 << 20}
	cg, err := Create(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mount := filepath.Dir(filepath.Dir(cg.GroupPath))
	t.Cleanup(func() { _ = cg.Remove(); _ = os.Remove(filepath.Join(mount, parent)) })
	limitFile := "memory.limit_in_bytes"
	if cg.Mode == V2 {
		limitFile = "memory.max"
	}
	b, err := os.ReadFile(filepath.Join(cg.Path, limitFile))
	if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(64<<20) {
		t.Fatalf("%s = %q (%v), want %d", limitFile, b, err, 64<<20)
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cg.ProcsFile(), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	if pids, err := cg.Pids(); err != nil || len(pids) != 1 || pids[0] != cmd.Process.Pid {
		t.Fatalf("Pids() = %v %v, want [%d]", pids, err, cmd.Process.Pid)
	}
	if _, err := Create(cfg); err == nil {
		t.Fatal("Create over a cgroup holding a process succeeded")
	}
	if err := cg.KillAll(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if err := cg.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cg.GroupPath); !os.IsNotExist(err) {
		t.Fatalf("group directory %s left behind (%v)", cg.GroupPath, err)
	}
}

func TestEscapeWritesOwnPidToEveryHierarchyRoot(t *testing.T) {
	root := t.TempDir()
	for _, dir := range []string{"memory", "cpu,cpuacct", "devices", "unified", "not-a-hierarchy"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("cpu,cpuacct", filepath.Join(root, "cpu")); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"memory", "cpu,cpuacct", "devices", "unified"} {
		if err := os.WriteFile(filepath.Join(root, dir, "cgroup.procs"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	moved, err := Escape(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(moved) != 4 {
		t.Fatalf("moved into %v, want the four hierarchies with a cgroup.procs (not the symlink, not a plain directory)", moved)
	}
	for _, procs := range moved {
		b, err := os.ReadFile(procs)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != strconv.Itoa(os.Getpid()) {
			t.Fatalf("%s holds %q, want our pid", procs, b)
		}
	}
}

func TestKeyedValueReadsTheOOMKillCountOfBothLayouts(t *testing.T) {
	v2 := "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n"
	v1 := "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"
	if n, err := keyedValue(v2, "oom_kill"); err != nil || n != 2 {
		t.Fatalf("v2: %d, %v", n, err)
	}
	if n, err := keyedValue(v1, "oom_kill"); err != nil || n != 1 {
		t.Fatalf("v1: %d, %v", n, err)
	}
	// A kernel without the counter (v1 before 4.13) says nothing: an error, not "no kill".
	if _, err := keyedValue("oom_kill_disable 0\nunder_oom 0\n", "oom_kill"); err == nil {
		t.Fatal("a file without oom_kill gave a count")
	}
}
