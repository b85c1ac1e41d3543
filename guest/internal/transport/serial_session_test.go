package transport

import (
	"context"
	"encoding/binary"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"imp.dev/guest/internal/proto"
)

// A socketpair stands in for the virtio-serial device: one fd the guest keeps open.
func socketPair(t *testing.T) (guest *os.File, host *os.File) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(fds[0]), "guest"), os.NewFile(uintptr(fds[1]), "host")
}

// echoServe answers every frame with the same frame and ends the session on a protocol error,
// like the real server does.
func echoServe(_ context.Context, rw io.ReadWriteCloser) {
	defer rw.Close()
	for {
		body, err := proto.ReadFrame(rw)
		if err != nil {
			return
		}
		frame, _ := proto.EncodeFrame(body)
		if _, err := rw.Write(frame); err != nil {
			return
		}
	}
}

func TestServeSerialStartsANewSessionOnTheSameOpenPortAfterOneEnds(t *testing.T) {
	guestEnd, host := socketPair(t)
	defer host.Close()
	port := &SerialPort{f: guestEnd}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ServeSerial(ctx, port, echoServe)

	roundTrip := func(msg string) {
		t.Helper()
		frame, _ := proto.EncodeFrame([]byte(msg))
		if _, err := host.Write(frame); err != nil {
			t.Fatal(err)
		}
		_ = host.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := proto.ReadFrame(host)
		if err != nil || string(got) != msg {
			t.Fatalf("echo = %q, %v", got, err)
		}
	}
	roundTrip(`{"first":1}`)
	// An oversize header ends the session; the port stays open and a new session follows.
	var header [4]byte
	binary.BigEndian.PutUint32(header[:], proto.MaxFrameBytes+1)
	if _, err := host.Write(header[:]); err != nil {
		t.Fatal(err)
	}
	roundTrip(`{"second":2}`)
}
