package transport

import (
	"net"

	"github.com/mdlayher/vsock"
)

// VsockPort is the guest agent's vsock port (docs/guest-protocol.md).
const VsockPort = 10700

// ListenVsock listens on the vsock port for any CID.
func ListenVsock(port uint32) (net.Listener, error) {
	return vsock.Listen(port, nil)
}
