package pid1

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// finalCache is where the cache volume's ext4 is mounted; each cached directory is bind-mounted
// from a directory of its own under dirs/.
const finalCache = "/.imp/cache"

// cachePath is what the host's API allows: an absolute path of plain segments (no commas, which
// separate them on the command line). Checked again here: the command line is the host's, but the
// guest does not bind over a path it cannot name safely.
var cachePath = regexp.MustCompile(`^(/[A-Za-z0-9_.-]+)+$`)

// CacheDevice is the block device of the VM's cache clone ("" = no cache volume).
func (c Cmdline) CacheDevice() string { return c.Params["imp.cache"] }

// CachePaths are the directories to keep on the cache volume, in order; a path that is not clean,
// absolute and plain is dropped (and named in the error). Pure.
func (c Cmdline) CachePaths() ([]string, error) {
	var paths, refused []string
	for _, p := range strings.Split(c.Params["imp.cache.paths"], ",") {
		switch {
		case p == "":
		// Clean rewrites any . or .. segment and a trailing slash, so a path it changes is refused.
		case !cachePath.MatchString(p) || filepath.Clean(p) != p:
			refused = append(refused, p)
		default:
			paths = append(paths, p)
		}
	}
	if len(refused) > 0 {
		return paths, fmt.Errorf("cache paths refused (not absolute, clean and plain): %s", strings.Join(refused, ","))
	}
	return paths, nil
}

// cacheDirName names path's directory on the volume: one flat name per path, so /a/b and /a-b
// never meet (paths have no '%', which the API and cachePath refuse).
func cacheDirName(path string) string {
	return strings.ReplaceAll(strings.TrimPrefix(path, "/"), "/", "%2F")
}

// MountCache mounts the cache volume and binds each path onto its directory there, before any
// service or job runs. A cache is a speed-up, never a condition: whatever fails is logged and the
// job runs on the image's own directories (cold), never a failed boot.
func MountCache(log *slog.Logger, device string, paths []string) {
	// Without nosuid/nodev, as the storage directories: Docker's layers on it keep setuid binaries
	// and device nodes. The guest is the job's own; the volume is its clone.
	if err := (Mount{Source: device, Target: finalCache, FSType: "ext4"}).mount(); err != nil {
		log.Warn("cache volume not mounted; the job runs without its cache", "device", device, "error", err)
		return
	}
	// Shallower paths first: /a bound after /a/b would hide /a/b's binding.
	sorted := append([]string(nil), paths...)
	sort.SliceStable(sorted, func(i, j int) bool { return strings.Count(sorted[i], "/") < strings.Count(sorted[j], "/") })
	for _, p := range sorted {
		if err := bindCacheDir(filepath.Join(finalCache, "dirs", cacheDirName(p)), p); err != nil {
			log.Warn("cache path not on the cache volume; it starts empty in this job", "path", p, "error", err)
			continue
		}
		log.Info("cache path on the cache volume", "path", p)
	}
}

// bindCacheDir binds source (made on first use, owned and moded like target, or like target's
// nearest existing parent when the image lacks it) onto target (made the same way).
func bindCacheDir(source, target string) error {
	uid, gid, mode, err := nearestOwner(target)
	if err != nil {
		return err
	}
	// The volume's own directories are root's; only each path's directory is its owner's.
	if err := os.MkdirAll(filepath.Dir(source), 0o755); err != nil {
		return fmt.Errorf("mkdir %s: %w", filepath.Dir(source), err)
	}
	if err := mkdirOwned(source, uid, gid, mode); err != nil {
		return err
	}
	if err := mkdirOwned(target, uid, gid, mode); err != nil {
		return err
	}
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", source, target, err)
	}
	return nil
}

// nearestOwner is the owner and permission bits of path, or of its nearest existing parent.
func nearestOwner(path string) (uid, gid int, mode os.FileMode, err error) {
	for p := path; ; p = filepath.Dir(p) {
		info, statErr := os.Stat(p)
		if statErr == nil {
			st, ok := info.Sys().(*syscall.Stat_t)
			if !ok {
				return 0, 0, 0, fmt.Errorf("stat %s: no owner", p)
			}
			return int(st.Uid), int(st.Gid), info.Mode().Perm(), nil
		}
		if p == "/" {
			return 0, 0, 0, fmt.Errorf("stat %s: %w", path, statErr)
		}
	}
}

// mkdirOwned makes dir and its missing parents, each new one owned by uid:gid with mode; an
// existing directory is left as it is.
func mkdirOwned(dir string, uid, gid int, mode os.FileMode) error {
	if info, err := os.Stat(dir); err == nil {
		if !info.IsDir() {
			return fmt.Errorf("%s exists and is not a directory", dir)
		}
		return nil
	}
	if err := mkdirOwned(filepath.Dir(dir), uid, gid, mode); err != nil {
		return err
	}
	if err := os.Mkdir(dir, mode); err != nil && !os.IsExist(err) {
		return fmt.Errorf("mkdir %s: %w", dir, err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return fmt.Errorf("chown %s: %w", dir, err)
	}
	return os.Chmod(dir, mode)
}
