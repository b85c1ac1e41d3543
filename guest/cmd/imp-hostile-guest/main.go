// Command imp-hostile-guest is a TEST FIXTURE, never shipped in an image a user runs: a guest agent
// that misbehaves on purpose, for test/integration/agent/hostile-guest.test.ts. It boots like the
// real agent (PID 1, pid1.Boot: mounts, overlay root, loopback) and then reads `imptest.hostile=<mode>`
// from the kernel command line (a dotted key, so it passes Imp's boot-argument check and never
// reaches init's environment):
//
//	(none)     the real guest agent's server on vsock port 10700: the control VMs of the test
//	garbage    every vsock connection gets one well-framed body that is not JSON, then silence
//	oversized  every vsock connection gets a frame header declaring 4 GiB, then zeros until it closes
//	silent     accepts every vsock connection, reads everything, never answers
//	flood      the real server, and the serial console flooded with junk lines as fast as the guest can write
//	late       the real server, until 2 s after its exec reply went out: then a non-JSON frame on that
//	           stream, between two real frames (the workload is running by then)
//
// It never exits: a PID 1 that exits panics the kernel, which would end the VM for a reason other
// than the one under test.
package main

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"imp.dev/guest/internal/execmgr"
	"imp.dev/guest/internal/exitrecord"
	"imp.dev/guest/internal/pid1"
	"imp.dev/guest/internal/server"
	"imp.dev/guest/internal/system"
	"imp.dev/guest/internal/transport"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if _, err := pid1.Boot(log, system.LoopbackUp); err != nil {
		log.Error("hostile guest: boot failed", "error", err)
		idle()
	}
	mode := hostileMode()
	log.Info("hostile guest serving", "mode", mode)
	ln, err := transport.ListenVsock(transport.VsockPort, log)
	if err != nil {
		log.Error("hostile guest: cannot listen on vsock", "error", err)
		idle()
	}
	switch mode {
	case "garbage":
		acceptForever(ln, func(c net.Conn) {
			body := []byte("\xff\xfe this is not JSON {{{")
			header := make([]byte, 4)
			binary.BigEndian.PutUint32(header, uint32(len(body)))
			_, _ = c.Write(append(header, body...))
			_, _ = io.Copy(io.Discard, c)
		})
	case "oversized":
		acceptForever(ln, func(c net.Conn) {
			_, _ = c.Write([]byte{0xff, 0xff, 0xff, 0xff})
			zeros := make([]byte, 64*1024)
			for {
				if _, err := c.Write(zeros); err != nil {
					return
				}
			}
		})
	case "silent":
		acceptForever(ln, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	case "flood":
		go flood()
		serveReal(ln, log)
	case "late":
		srv := realServer(log)
		acceptForever(ln, func(c net.Conn) { proxyThenGarbage(c, srv) })
	default:
		serveReal(ln, log)
	}
}

func hostileMode() string {
	text, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return ""
	}
	for _, word := range strings.Fields(string(text)) {
		if v, ok := strings.CutPrefix(word, "imptest.hostile="); ok {
			return v
		}
	}
	return ""
}

// realServer is the real guest agent's protocol server (as cmd/imp-guest wires it in PID-1 mode).
func realServer(log *slog.Logger) *server.Server {
	reaper := execmgr.NewReaper(log)
	go reaper.Run(context.Background())
	return server.New(reaper, log, server.Options{
		Agent:    "imp-hostile-guest/0 (control)",
		System:   &system.Linux{Root: "/", Log: log},
		Shutdown: func(mode string) { pid1.PowerOff(log, mode) },
		Records:  exitrecord.NewWriter(os.Stderr),
	})
}

func serveReal(ln net.Listener, log *slog.Logger) {
	if err := realServer(log).Serve(context.Background(), ln, "vsock"); err != nil {
		log.Error("hostile guest: server stopped", "error", err)
	}
	idle()
}

// proxyThenGarbage serves the host through the real server on an in-memory pipe, copying the
// server's frames to the host one whole frame at a time; 2 s after a frame of type "exec" passed it
// slips a non-JSON frame in between two real ones.
func proxyThenGarbage(host net.Conn, srv *server.Server) {
	inner, agent := net.Pipe()
	defer inner.Close()
	go srv.ServeConn(context.Background(), agent, "vsock-proxy")
	go func() { _, _ = io.Copy(inner, host) }()
	var inject <-chan time.Time
	frames := make(chan []byte)
	go func() {
		defer close(frames)
		for {
			header := make([]byte, 4)
			if _, err := io.ReadFull(inner, header); err != nil {
				return
			}
			body := make([]byte, binary.BigEndian.Uint32(header))
			if _, err := io.ReadFull(inner, body); err != nil {
				return
			}
			frames <- append(header, body...)
		}
	}()
	for {
		select {
		case frame, ok := <-frames:
			if !ok {
				return
			}
			if _, err := host.Write(frame); err != nil {
				return
			}
			if inject == nil && strings.Contains(string(frame[4:]), `"type":"exec"`) {
				inject = time.After(2 * time.Second)
			}
		case <-inject:
			body := []byte("\xff\xfe late garbage, not JSON")
			header := make([]byte, 4)
			binary.BigEndian.PutUint32(header, uint32(len(body)))
			_, _ = host.Write(append(header, body...))
			inject = nil
		}
	}
}

func acceptForever(ln net.Listener, handle func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		go func() {
			defer c.Close()
			handle(c)
		}()
	}
}

// flood writes junk to the serial console without pause; QEMU appends it to the VM's serial.log.
func flood() {
	console, err := os.OpenFile("/dev/console", os.O_WRONLY, 0)
	if err != nil {
		console = os.Stdout
	}
	line := []byte(strings.Repeat("hostile console flood ", 6) + "\n")
	for {
		if _, err := console.Write(line); err != nil {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func idle() {
	for {
		time.Sleep(time.Hour)
	}
}
