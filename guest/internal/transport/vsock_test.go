package transport

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/mdlayher/vsock"
)

func TestFromHostAcceptsOnlyContextID2(t *testing.T) {
	cases := []struct {
		addr net.Addr
		want bool
	}{
		{&vsock.Addr{ContextID: 2, Port: 1234}, true},
		{&vsock.Addr{ContextID: 1, Port: 1234}, false},       // VMADDR_CID_LOCAL: loopback inside the guest
		{&vsock.Addr{ContextID: 3, Port: 1234}, false},       // the guest's own CID, or another VM
		{&vsock.Addr{ContextID: 0, Port: 1234}, false},       // hypervisor
		{&vsock.Addr{ContextID: ^uint32(0), Port: 1}, false}, // VMADDR_CID_ANY
		{(*vsock.Addr)(nil), false},
		{&net.UnixAddr{Name: "/x", Net: "unix"}, false},
		{nil, false},
	}
	for _, tc := range cases {
		if got := FromHost(tc.addr); got != tc.want {
			t.Errorf("FromHost(%v) = %v, want %v", tc.addr, got, tc.want)
		}
	}
}

// fakeConn is a net.Conn with a remote address that records Close.
type fakeConn struct {
	net.Conn
	remote net.Addr
	closed bool
}

func (c *fakeConn) RemoteAddr() net.Addr { return c.remote }
func (c *fakeConn) Close() error         { c.closed = true; return nil }

type fakeListener struct {
	net.Listener
	conns []*fakeConn
}

func (l *fakeListener) Accept() (net.Conn, error) {
	if len(l.conns) == 0 {
		return nil, net.ErrClosed
	}
	c := l.conns[0]
	l.conns = l.conns[1:]
	return c, nil
}

func TestHostOnlyListenerClosesOtherPeersAndHandsOutTheHost(t *testing.T) {
	local := &fakeConn{remote: &vsock.Addr{ContextID: 3, Port: 50000}}
	loop := &fakeConn{remote: &vsock.Addr{ContextID: 1, Port: 50001}}
	host := &fakeConn{remote: &vsock.Addr{ContextID: 2, Port: 50002}}
	logs := &bytes.Buffer{}
	ln := &HostOnlyListener{Listener: &fakeListener{conns: []*fakeConn{local, loop, host}}, Log: slog.New(slog.NewTextHandler(logs, nil))}
	c, err := ln.Accept()
	if err != nil || c != host {
		t.Fatalf("Accept = %v, %v; want the host's connection", c, err)
	}
	if !local.closed || !loop.closed || host.closed {
		t.Fatalf("closed: cid3=%v cid1=%v host=%v", local.closed, loop.closed, host.closed)
	}
	if !strings.Contains(logs.String(), "vm(3)") || !strings.Contains(logs.String(), "local(1)") {
		t.Fatalf("refusals not logged with the CID:\n%s", logs)
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after the end = %v", err)
	}
}
