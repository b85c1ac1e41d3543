package pid1

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

func TestCachePathsKeepsPlainAbsolutePathsAndNamesTheRest(t *testing.T) {
	c := ParseCmdline(`ro imp.cache=/dev/vdc imp.cache.paths=/var/lib/docker,/home/runner/.cache,relative,/a/../etc,/b/./c,/d/`)
	if c.CacheDevice() != "/dev/vdc" {
		t.Fatalf("device %q", c.CacheDevice())
	}
	paths, err := c.CachePaths()
	if want := []string{"/var/lib/docker", "/home/runner/.cache"}; !reflect.DeepEqual(paths, want) {
		t.Fatalf("paths %v, want %v", paths, want)
	}
	if err == nil {
		t.Fatal("refused paths were not named")
	}
	for _, bad := range []string{"relative", "/a/../etc", "/b/./c", "/d/"} {
		if !strings.Contains(err.Error(), bad) {
			t.Errorf("error %q does not name %q", err, bad)
		}
	}
	if none := ParseCmdline("ro imp.scratch=/dev/vdb"); none.CacheDevice() != "" {
		t.Fatalf("a VM without a cache got device %q", none.CacheDevice())
	}
}

func TestCacheDirNamesNeverMeet(t *testing.T) {
	if a, b := cacheDirName("/a/b"), cacheDirName("/a-b"); a == b {
		t.Fatalf("/a/b and /a-b share %q", a)
	}
	if got := cacheDirName("/home/runner/.cache"); got != "home%2Frunner%2F.cache" {
		t.Fatalf("got %q", got)
	}
}

// A path the image lacks is made owned like its nearest parent (the runner's ~/.cache under its
// home), and an existing one keeps its owner.
func TestMkdirOwnedTakesTheNearestParentsOwner(t *testing.T) {
	// Root gives the home to another user, as the runner's is; anyone else keeps their own ids.
	owner, group := os.Getuid(), os.Getgid()
	if owner == 0 {
		owner, group = 1001, 1002
	}
	root := t.TempDir()
	home := filepath.Join(root, "home", "runner")
	if err := os.MkdirAll(home, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, owner, group); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(home, ".cache", "pip")
	uid, gid, mode, err := nearestOwner(target)
	if err != nil || uid != owner || gid != group || mode != 0o750 {
		t.Fatalf("nearestOwner = %d %d %v %v", uid, gid, mode, err)
	}
	if err := mkdirOwned(target, uid, gid, mode); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(home, ".cache"), target} {
		info, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		st := info.Sys().(*syscall.Stat_t)
		if int(st.Uid) != owner || int(st.Gid) != group || info.Mode().Perm() != 0o750 {
			t.Errorf("%s: %d:%d %v", d, st.Uid, st.Gid, info.Mode().Perm())
		}
	}
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := mkdirOwned(file, 0, 0, 0o755); err == nil {
		t.Fatal("a file was taken for a directory")
	}
}
