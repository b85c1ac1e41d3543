package transport

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFindSerialPortMatchesTheNameFile(t *testing.T) {
	sys := t.TempDir()
	for dev, name := range map[string]string{"vport0p1": "org.qemu.guest_agent.0", "vport1p2": "imp.agent"} {
		dir := filepath.Join(sys, "class/virtio-ports", dev)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "name"), []byte(name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := FindSerialPort(sys, "imp.agent"); got != "/dev/vport1p2" {
		t.Fatalf("got %q", got)
	}
	if got := FindSerialPort(sys, "missing"); got != "" {
		t.Fatalf("got %q", got)
	}
}
