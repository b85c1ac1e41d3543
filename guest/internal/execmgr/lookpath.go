package execmgr

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// DefaultPath is used to find argv[0] when the exec's env has no PATH.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// lookPath resolves a program name against the exec's own PATH (not the agent's).
func lookPath(name string, env map[string]string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path, ok := env["PATH"]
	if !ok {
		path = DefaultPath
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		candidate := filepath.Join(dir, name)
		if st, err := os.Stat(candidate); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return candidate, nil
		}
	}
	return "", errors.New("cannot find " + name + " in PATH")
}
