package pid1

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// DevLink is one symbolic link under /dev.
type DevLink struct{ Path, Target string }

// DevLinks are the links every init system and container runtime makes in /dev (systemd's
// static-nodes/tmpfiles, runc's default links) and that a fresh devtmpfs lacks. Without them bash's
// process substitution (`diff <(a) <(b)` opens /dev/fd/63), `cat /dev/stdin` and `echo … >
// /dev/stderr` fail in every job, though they work on a hosted runner and in any container.
func DevLinks() []DevLink {
	return []DevLink{
		{Path: "/dev/fd", Target: "/proc/self/fd"},
		{Path: "/dev/stdin", Target: "/proc/self/fd/0"},
		{Path: "/dev/stdout", Target: "/proc/self/fd/1"},
		{Path: "/dev/stderr", Target: "/proc/self/fd/2"},
		{Path: "/dev/core", Target: "/proc/kcore"},
	}
}

// MakeDevLinks creates each link under root (normally "/"). A link already pointing at its target
// is fine; anything else at that path is an error, because the job would see a different device
// from the one it expects.
func MakeDevLinks(root string, links []DevLink) error {
	for _, l := range links {
		path := filepath.Join(root, l.Path)
		err := os.Symlink(l.Target, path)
		if err == nil {
			continue
		}
		if !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("link %s: %w", l.Path, err)
		}
		if got, readErr := os.Readlink(path); readErr != nil || got != l.Target {
			return fmt.Errorf("link %s: something else is there (points to %q)", l.Path, got)
		}
	}
	return nil
}
