package system

import (
	"os"
	"path/filepath"
	"strings"
)

// hostsMarker ends the one line of /etc/hosts the guest agent owns, so a second configure replaces it.
const hostsMarker = "# imp-guest"

// maxHostsBytes bounds what is read of the image's /etc/hosts.
const maxHostsBytes = 64 << 10

// hostsWith is the image's /etc/hosts with the VM's hostname on 127.0.1.1 (as Debian's installer
// writes it), replacing the line an earlier configure added; with localhost lines when the image has
// no file. Without it `hostname -f`, `getent hosts $(hostname)` and every `sudo` (which resolves the
// host's own name) fail or stall in the job.
func hostsWith(existing, hostname string) string {
	var kept []string
	if existing == "" {
		kept = []string{"127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"}
	}
	for _, line := range strings.Split(strings.TrimRight(existing, "\n"), "\n") {
		if line == "" && existing == "" {
			continue
		}
		if !strings.HasSuffix(strings.TrimSpace(line), hostsMarker) {
			kept = append(kept, line)
		}
	}
	kept = append(kept, "127.0.1.1\t"+hostname+"\t"+hostsMarker)
	return strings.Join(kept, "\n") + "\n"
}

// writeHostname makes the VM's name resolvable (/etc/hosts) and the name the system files say
// (/etc/hostname), replacing each file atomically: a symlink there is replaced, not followed.
func writeHostname(root, hostname string) error {
	hosts := filepath.Join(root, "etc/hosts")
	existing := ""
	if f, err := os.Open(hosts); err == nil {
		buf := make([]byte, maxHostsBytes)
		n, _ := f.Read(buf)
		_ = f.Close()
		existing = string(buf[:n])
	}
	if err := replaceFile(hosts, hostsWith(existing, hostname)); err != nil {
		return err
	}
	return replaceFile(filepath.Join(root, "etc/hostname"), hostname+"\n")
}

func replaceFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".imp-tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
