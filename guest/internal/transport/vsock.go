package transport

import (
	"log/slog"
	"net"

	"github.com/mdlayher/vsock"
)

// VsockPort is the guest agent's vsock port (docs/guest-protocol.md).
const VsockPort = 10700

// HostCID is the context id of the host (VMADDR_CID_HOST). Only it may talk to the agent.
const HostCID = vsock.Host

// ListenVsock listens on the vsock port and hands out only connections from the host (CID 2).
// Anything else — a process inside the guest reaching the port through a loopback transport
// (VSOCKETS_LOOPBACK), or another VM — is closed at once and logged, never served: the agent runs
// execs as root.
func ListenVsock(port uint32, log *slog.Logger) (net.Listener, error) {
	ln, err := vsock.Listen(port, nil)
	if err != nil {
		return nil, err
	}
	return &HostOnlyListener{Listener: ln, Log: log}, nil
}

// FromHost reports whether a connection's remote address is the host's end of vsock. Pure.
func FromHost(remote net.Addr) bool {
	addr, ok := remote.(*vsock.Addr)
	return ok && addr != nil && addr.ContextID == HostCID
}

// HostOnlyListener wraps a vsock listener so Accept returns only connections from the host.
type HostOnlyListener struct {
	net.Listener
	Log *slog.Logger
}

// Accept returns the next connection from the host; others are closed and skipped.
func (l *HostOnlyListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if FromHost(c.RemoteAddr()) {
			return c, nil
		}
		cid := "?"
		if addr, ok := c.RemoteAddr().(*vsock.Addr); ok && addr != nil {
			cid = addr.String()
		}
		l.Log.Warn("refused a vsock connection that is not from the host", "remote", cid, "wantCID", HostCID)
		_ = c.Close()
	}
}
