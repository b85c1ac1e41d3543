// Package transport finds and opens the host channels: vsock and the virtio-serial port.
package transport

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// FindSerialPort returns /dev/<vportNpM> for the virtio-serial port with the given name, or "".
// sysRoot is "/sys" in a VM (a parameter so tests can use a fake tree).
func FindSerialPort(sysRoot, name string) string {
	entries, err := filepath.Glob(filepath.Join(sysRoot, "class/virtio-ports/*/name"))
	if err != nil {
		return ""
	}
	for _, entry := range entries {
		b, err := os.ReadFile(entry)
		if err != nil || strings.TrimSpace(string(b)) != name {
			continue
		}
		return "/dev/" + filepath.Base(filepath.Dir(entry))
	}
	return ""
}

// SerialPort keeps a virtio-serial device open for the agent's whole life (data the host sends
// while the guest has it closed can be lost) and hands out one session at a time. A read of 0
// bytes means "no host connected": the session waits and reads again instead of ending.
type SerialPort struct {
	f *os.File
}

// OpenSerialPort opens the device read-write.
func OpenSerialPort(path string) (*SerialPort, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return &SerialPort{f: f}, nil
}

// Session is one protocol stream over the port; Close ends the session, not the port.
func (p *SerialPort) Session() io.ReadWriteCloser {
	_ = p.f.SetReadDeadline(time.Time{})
	return &serialSession{port: p, closed: make(chan struct{})}
}

type serialSession struct {
	port      *SerialPort
	closed    chan struct{}
	closeOnce sync.Once
}

func (s *serialSession) Read(b []byte) (int, error) {
	for {
		n, err := s.port.f.Read(b)
		if n > 0 {
			return n, nil
		}
		select {
		case <-s.closed:
			return 0, io.EOF
		default:
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		// EOF: the host end is not connected. Poll until it is.
		select {
		case <-s.closed:
			return 0, io.EOF
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (s *serialSession) Write(b []byte) (int, error) { return s.port.f.Write(b) }

func (s *serialSession) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		// Unblock a pending Read without closing the device.
		_ = s.port.f.SetReadDeadline(time.Now())
	})
	return nil
}

// ServeSerial serves sessions on the port one after another until ctx ends; a session that ends
// (protocol error, write failure) is followed by a fresh one after a short backoff.
func ServeSerial(ctx context.Context, port *SerialPort, serve func(ctx context.Context, rw io.ReadWriteCloser)) {
	delay := 100 * time.Millisecond
	for ctx.Err() == nil {
		started := time.Now()
		serve(ctx, port.Session())
		if time.Since(started) > 10*time.Second {
			delay = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(delay*2, 2*time.Second)
	}
}
