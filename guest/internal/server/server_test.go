package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"imp.dev/guest/internal/execmgr"
	"imp.dev/guest/internal/proto"
	"imp.dev/guest/internal/system"
)

var testReaper *execmgr.Reaper

func TestMain(m *testing.M) {
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	testReaper = execmgr.NewReaper(slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	go testReaper.Run(ctx)
	code := m.Run()
	cancel()
	os.Exit(code)
}

type harness struct {
	t        *testing.T
	sock     string
	dry      *system.Dry
	mu       sync.Mutex
	shutdown []string
	logs     *syncBuffer
}

// syncBuffer collects the server's log output; safe for concurrent writes and reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func start(t *testing.T, opts Options) *harness {
	t.Helper()
	h := &harness{t: t, sock: filepath.Join(t.TempDir(), "agent.sock"), logs: &syncBuffer{}}
	log := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h.dry = system.NewDry(log)
	opts.Agent = "imp-guest/test"
	if opts.System == nil {
		opts.System = h.dry
	}
	opts.Shutdown = func(mode string) {
		h.mu.Lock()
		h.shutdown = append(h.shutdown, mode)
		h.mu.Unlock()
	}
	srv := New(testReaper, log, opts)
	ln, err := net.Listen("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = srv.Serve(ctx, ln, "unix") }()
	return h
}

type client struct {
	t *testing.T
	c net.Conn
	// backlog holds messages read but not yet consumed. Events are not ordered against replies
	// (docs/guest-protocol.md): a short exec's output and exit may arrive before its exec reply, so a
	// wait for one message must keep the others it reads, not drop them.
	backlog []map[string]any
}

func (h *harness) dial() *client {
	h.t.Helper()
	c, err := net.Dial("unix", h.sock)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return &client{t: h.t, c: c}
}

func (c *client) sendRaw(b []byte) {
	c.t.Helper()
	if _, err := c.c.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

func (c *client) send(msg string) {
	c.t.Helper()
	f, err := proto.EncodeFrame([]byte(msg))
	if err != nil {
		c.t.Fatal(err)
	}
	c.sendRaw(f)
}

// recv returns the next message not yet consumed, or nil when the stream ended.
func (c *client) recv() map[string]any {
	c.t.Helper()
	if len(c.backlog) > 0 {
		m := c.backlog[0]
		c.backlog = c.backlog[1:]
		return m
	}
	return c.read()
}

// read returns the next message from the stream, or nil when the stream ended.
func (c *client) read() map[string]any {
	c.t.Helper()
	_ = c.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	body, err := proto.ReadFrame(c.c)
	if err == io.EOF {
		return nil
	}
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		c.t.Fatal(err)
	}
	return m
}

// until returns (and consumes) the first message matching type (and id, if id >= 0); the messages
// it passes over stay in the backlog for later calls, in the order they arrived.
func (c *client) until(typ string, id float64) map[string]any {
	c.t.Helper()
	match := func(m map[string]any) bool { return m["type"] == typ && (id < 0 || m["id"] == id) }
	for i, m := range c.backlog {
		if match(m) {
			c.backlog = append(c.backlog[:i:i], c.backlog[i+1:]...)
			return m
		}
	}
	for {
		m := c.read()
		if m == nil {
			c.t.Fatalf("stream ended while waiting for %s", typ)
		}
		if match(m) {
			return m
		}
		c.backlog = append(c.backlog, m)
	}
}

func TestMalformedRequestsGetErrorsAndTheStreamKeepsServing(t *testing.T) {
	h := start(t, Options{})
	c := h.dial()
	cases := []struct{ body, code string }{
		{`not json`, proto.CodeBadJSON},
		{`{"v":1,"type":"nope","id":5}`, proto.CodeUnknownType},
		{`{"v":9,"type":"hello","id":6,"versions":[9]}`, proto.CodeUnsupportedVersion},
		{`{"v":1,"type":"exec","id":7,"execId":"x","argv":"ls","env":{}}`, proto.CodeBadMessage},
		{`{"v":1,"type":"exec.status","id":8,"execId":"missing"}`, proto.CodeNotFound},
		{`{"v":1,"type":"signal","id":9,"execId":"missing","signal":"SIGTERM"}`, proto.CodeNotFound},
		{`{"v":1,"type":"hello","id":10,"versions":[2,3]}`, proto.CodeUnsupportedVersion},
	}
	for _, tc := range cases {
		c.send(tc.body)
		m := c.recv()
		if m["type"] != "error" || m["code"] != tc.code {
			t.Fatalf("%s: got %v, want error %s", tc.body, m, tc.code)
		}
	}
	c.send(`{"v":1,"type":"hello","id":11,"versions":[1],"client":"t"}`)
	if m := c.recv(); m["type"] != "hello" || m["id"] != float64(11) || m["agent"] != "imp-guest/test" {
		t.Fatalf("hello after errors: %v", m)
	}
}

func TestOversizeFrameClosesOnlyThatStream(t *testing.T) {
	h := start(t, Options{})
	bad, good := h.dial(), h.dial()
	good.send(`{"v":1,"type":"hello","id":1,"versions":[1]}`)
	good.until("hello", 1)
	var header [4]byte
	binary.BigEndian.PutUint32(header[:], proto.MaxFrameBytes+1)
	bad.sendRaw(header[:])
	if m := bad.recv(); m["type"] != "error" || m["code"] != proto.CodeFrameTooLarge || m["id"] != float64(0) {
		t.Fatalf("got %v", m)
	}
	if m := bad.recv(); m != nil {
		t.Fatalf("stream still open: %v", m)
	}
	good.send(`{"v":1,"type":"exec","id":2,"execId":"after-oversize","argv":["/bin/echo","hi"],"env":{}}`)
	if m := good.until("exec", 2); m["started"] != true {
		t.Fatalf("exec: %v", m)
	}
	if m := good.until("exit", 0); m["exitCode"] != float64(0) {
		t.Fatalf("exit: %v", m)
	}
}

func TestEventsGoToEveryStreamAndExecIsIdempotentAcrossReconnects(t *testing.T) {
	h := start(t, Options{})
	a, b := h.dial(), h.dial()
	b.send(`{"v":1,"type":"hello","id":1,"versions":[1]}`)
	b.until("hello", 1) // b is registered before the exec starts
	exec := `{"v":1,"type":"exec","id":2,"execId":"shared","argv":["/bin/sh","-c","echo out"],"env":{}}`
	a.send(exec)
	if m := a.until("exec", 2); m["started"] != true || m["state"] != "running" {
		t.Fatalf("exec: %v", m)
	}
	for _, c := range []*client{a, b} {
		out := c.until("output", 0)
		if out["execId"] != "shared" || out["data"] != "b3V0Cg==" || out["seq"] != float64(0) {
			t.Fatalf("output: %v", out)
		}
		if m := c.until("exit", 0); m["exitCode"] != float64(0) {
			t.Fatalf("exit: %v", m)
		}
	}
	a.c.Close()
	c := h.dial()
	c.send(exec)
	if m := c.until("exec", 2); m["started"] != false || m["state"] != "exited" || m["exitCode"] != float64(0) {
		t.Fatalf("repeated exec: %v", m)
	}
	c.send(`{"v":1,"type":"exec.status","id":3,"execId":"shared"}`)
	if m := c.until("exec.status", 3); m["state"] != "exited" {
		t.Fatalf("status: %v", m)
	}
}

func TestAStalledStreamIsClosedAndTheOthersGoOn(t *testing.T) {
	// The stall bound must be long enough that the live stream's reader (this test goroutine) is never
	// late by that much on a loaded machine, or the live stream is the one closed.
	h := start(t, Options{StallTimeout: 3 * time.Second})
	stalled, live := h.dial(), h.dial()
	stalled.send(`{"v":1,"type":"hello","id":1,"versions":[1]}`)
	live.send(`{"v":1,"type":"hello","id":1,"versions":[1]}`)
	live.until("hello", 1)
	// ~8 MiB of output: far more than the stalled stream's queue and socket buffers hold.
	live.send(`{"v":1,"type":"exec","id":2,"execId":"flood","argv":["/bin/sh","-c","head -c 8000000 /dev/zero"],"env":{}}`)
	live.until("exec", 2)
	if m := live.until("exit", 0); m["execId"] != "flood" || m["exitCode"] != float64(0) {
		t.Fatalf("exit: %v", m)
	}
	// The stalled stream was closed by the guest (possibly mid-frame): reading it ends.
	_ = stalled.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		if _, err := proto.ReadFrame(stalled.c); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the stalled stream was never closed")
			}
			break
		}
	}
}

func TestShutdownRepliesBeforeItActsAndOnlyOnce(t *testing.T) {
	h := start(t, Options{})
	c := h.dial()
	c.send(`{"v":1,"type":"shutdown","id":1,"mode":"reboot"}`)
	if m := c.until("shutdown", 1); m["type"] != "shutdown" {
		t.Fatalf("got %v", m)
	}
	c.send(`{"v":1,"type":"shutdown","id":2,"mode":"poweroff"}`)
	c.until("shutdown", 2)
	c.send(`{"v":1,"type":"exec","id":3,"execId":"late","argv":["/bin/true"],"env":{}}`)
	if m := c.until("error", 3); m["code"] != proto.CodeShuttingDown {
		t.Fatalf("exec after shutdown: %v", m)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.mu.Lock()
		got := append([]string(nil), h.shutdown...)
		h.mu.Unlock()
		if len(got) == 1 && got[0] == "reboot" {
			break
		}
		if len(got) > 1 || time.Now().After(deadline) {
			t.Fatalf("shutdown calls: %v", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestConfigureIsValidatedAndHandedToTheSystem(t *testing.T) {
	h := start(t, Options{})
	c := h.dial()
	c.send(`{"v":1,"type":"configure","id":1,"hostname":"runner-1","network":{"interface":"eth0","address":"10.1.0.2/30","gateway":"10.1.0.1","dns":["10.1.0.1"]},"entropySeed":"AAECAwQFBgcICQoLDA0ODw=="}`)
	if m := c.until("configure", 1); len(m) != 3 {
		t.Fatalf("reply: %v", m)
	}
	last := h.dry.Last()
	if last == nil || *last.Hostname != "runner-1" || last.Network.Gateway != "10.1.0.1" || len(last.Seed) != 16 {
		t.Fatalf("system saw %+v", last)
	}
}

func TestStreamsBeyondTheLimitAreRefusedAndTheOthersKeepWorking(t *testing.T) {
	h := start(t, Options{MaxStreams: 2})
	a, b := h.dial(), h.dial()
	for _, c := range []*client{a, b} {
		c.send(`{"v":1,"type":"hello","id":1,"versions":[1]}`)
		c.until("hello", 1)
	}
	extra := h.dial()
	if m := extra.recv(); m["type"] != "error" || m["code"] != proto.CodeTooManyStreams {
		t.Fatalf("got %v", m)
	}
	if m := extra.recv(); m != nil {
		t.Fatalf("refused stream still open: %v", m)
	}
	a.c.Close()
	// The freed slot is reusable (the server notices the close asynchronously; retry briefly).
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := h.dial()
		c.send(`{"v":1,"type":"hello","id":2,"versions":[1]}`)
		if m := c.recv(); m["type"] == "hello" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("slot never freed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.send(`{"v":1,"type":"hello","id":3,"versions":[1]}`)
	b.until("hello", 3)
}

func TestShutdownAfterExitShutsDownOnceTheExitEventWasWritten(t *testing.T) {
	h := start(t, Options{})
	c := h.dial()
	c.send(`{"v":1,"type":"exec","id":1,"execId":"last","argv":["/bin/sh","-c","exit 4"],"env":{},"shutdownAfterExit":"reboot"}`)
	if m := c.until("exit", 0); m["execId"] != "last" || m["exitCode"] != float64(4) {
		t.Fatalf("exit: %v", m)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		h.mu.Lock()
		got := append([]string(nil), h.shutdown...)
		h.mu.Unlock()
		if len(got) == 1 && got[0] == "reboot" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("shutdown calls: %v", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A repeat of the id with the option is answered from the record and shuts nothing down again.
	c.send(`{"v":1,"type":"exec","id":2,"execId":"last","argv":["/bin/true"],"env":{},"shutdownAfterExit":"poweroff"}`)
	if m := c.until("exec", 2); m["started"] != false || m["state"] != "exited" {
		t.Fatalf("repeat: %v", m)
	}
}

func TestExecWithoutShutdownAfterExitLeavesTheGuestUp(t *testing.T) {
	h := start(t, Options{})
	c := h.dial()
	c.send(`{"v":1,"type":"exec","id":1,"execId":"plain","argv":["/bin/true"],"env":{}}`)
	c.until("exit", 0)
	c.send(`{"v":1,"type":"hello","id":2,"versions":[1]}`)
	c.until("hello", 2)
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.shutdown) != 0 {
		t.Fatalf("shut down: %v", h.shutdown)
	}
}

func TestSignalAfterExitIsASuccessfulNoOp(t *testing.T) {
	h := start(t, Options{})
	c := h.dial()
	c.send(`{"v":1,"type":"exec","id":1,"execId":"gone","argv":["/bin/true"],"env":{}}`)
	c.until("exit", 0)
	for id := 2; id <= 3; id++ { // and again: safe to retry
		c.send(fmt.Sprintf(`{"v":1,"type":"signal","id":%d,"execId":"gone","signal":"SIGKILL"}`, id))
		m := c.recv()
		for m != nil && m["id"] != float64(id) {
			m = c.recv()
		}
		if m == nil || m["type"] != "signal" || m["error"] != nil {
			t.Fatalf("signal after exit: %v", m)
		}
	}
}

// panickingSystem stands in for a buggy handler: configure panics, quoting the request.
type panickingSystem struct{ runtimeError bool }

func (p panickingSystem) Configure(_ context.Context, req *proto.ConfigureRequest) error {
	if p.runtimeError {
		var m map[string]int
		m[*req.Hostname] = 1 // assignment to a nil map: a runtime.Error
	}
	panic("cannot configure " + *req.Hostname)
}

func TestAPanickingHandlerIsAnsweredWithInternalAndTheAgentKeepsServing(t *testing.T) {
	for _, runtimeError := range []bool{false, true} {
		h := start(t, Options{System: panickingSystem{runtimeError: runtimeError}})
		c, other := h.dial(), h.dial()
		other.send(`{"v":1,"type":"hello","id":1,"versions":[1]}`)
		other.until("hello", 1)
		const secret = "secret-host-name-4f1d"
		c.send(`{"v":1,"type":"configure","id":7,"hostname":"` + secret + `"}`)
		m := c.until("error", 7)
		if m["code"] != proto.CodeInternal || strings.Contains(fmt.Sprint(m), secret) {
			t.Fatalf("reply to the panicking request: %v", m)
		}
		// The same stream and the others keep serving.
		c.send(`{"v":1,"type":"hello","id":8,"versions":[1]}`)
		c.until("hello", 8)
		other.send(`{"v":1,"type":"exec","id":2,"execId":"after-panic","argv":["/bin/true"],"env":{}}`)
		if m := other.until("exec", 2); m["started"] != true {
			t.Fatalf("exec after the panic: %v", m)
		}
		logs := h.logs.String()
		if !strings.Contains(logs, "request handler panicked") || !strings.Contains(logs, "type=configure") {
			t.Fatalf("panic not logged:\n%s", logs)
		}
		if strings.Contains(logs, secret) {
			t.Fatalf("the log quotes the request:\n%s", logs)
		}
	}
}
