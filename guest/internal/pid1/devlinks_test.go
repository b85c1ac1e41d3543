package pid1

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDevLinksCoverWhatShellsAndRunnersOpen(t *testing.T) {
	want := map[string]string{
		"/dev/fd": "/proc/self/fd", "/dev/stdin": "/proc/self/fd/0",
		"/dev/stdout": "/proc/self/fd/1", "/dev/stderr": "/proc/self/fd/2",
	}
	got := map[string]string{}
	for _, l := range DevLinks() {
		got[l.Path] = l.Target
	}
	for path, target := range want {
		if got[path] != target {
			t.Fatalf("%s -> %q, want %q", path, got[path], target)
		}
	}
}

func TestMakeDevLinksCreatesLinksAndIsIdempotent(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := MakeDevLinks(root, DevLinks()); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
	got, err := os.Readlink(filepath.Join(root, "dev/fd"))
	if err != nil || got != "/proc/self/fd" {
		t.Fatalf("dev/fd -> %q (%v)", got, err)
	}
}

func TestMakeDevLinksRefusesSomethingElseAtTheLinksPath(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/elsewhere", filepath.Join(root, "dev/stdin")); err != nil {
		t.Fatal(err)
	}
	err := MakeDevLinks(root, DevLinks())
	if err == nil || !strings.Contains(err.Error(), "/dev/stdin") {
		t.Fatalf("err = %v, want one naming /dev/stdin", err)
	}
}
