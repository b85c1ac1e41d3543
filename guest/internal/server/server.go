// Package server serves the guest protocol on any number of byte streams at once. Each stream has
// its own reader and bounded writer; a broken stream is closed alone and never affects the others.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"imp.dev/guest/internal/execmgr"
	"imp.dev/guest/internal/exitrecord"
	"imp.dev/guest/internal/proto"
)

// System applies `configure` to the machine. The PID-1 implementation changes the VM; the dry one
// (tests, --no-init) only validates and records.
type System interface {
	Configure(ctx context.Context, req *proto.ConfigureRequest) error
}

// Options configure a Server.
type Options struct {
	Agent  string // reported in hello, e.g. "imp-guest/0.1.0"
	System System // required
	// Shutdown is called once, after the shutdown reply was flushed, on its own goroutine.
	Shutdown func(mode string)
	// StallTimeout is how long a stream's full send queue may block before the stream is closed. Default 5 s.
	StallTimeout time.Duration
	// MaxStreams bounds concurrently served streams; one more gets too_many_streams and is closed. Default 32.
	MaxStreams int
	Exec       execmgr.Options
	// Records writes the authenticated exit records (the console in a VM); nil = none are written
	// and a configure carrying exitRecordKey fails.
	Records *exitrecord.Writer
}

// Capabilities lists what this agent implements (hello reply).
var Capabilities = []string{"configure", "exec", "exec.status", "signal", "shutdown", "output", "exit", "exit-record"}

// Server dispatches requests from host streams to the exec manager and the system.
type Server struct {
	opts         Options
	log          *slog.Logger
	hub          *Hub
	execs        *execmgr.Manager
	shuttingDown atomic.Bool
	// execRequests counts exec requests being answered (from decode until the reply is queued): an
	// exec with shutdownAfterExit may exit before its reply is queued, and the shutdown must not
	// overtake the reply (the host would see the stream close instead).
	execRequests atomic.Int64
}

// New builds a Server; the reaper must be running for exec exits to be reported.
func New(reaper *execmgr.Reaper, log *slog.Logger, opts Options) *Server {
	if opts.StallTimeout <= 0 {
		opts.StallTimeout = 5 * time.Second
	}
	if opts.MaxStreams <= 0 {
		opts.MaxStreams = 32
	}
	s := &Server{opts: opts, log: log, hub: newHub(log)}
	opts.Exec.Exited = s.onExecExited
	opts.Exec.Record = s.writeExitRecord
	s.execs = execmgr.NewManager(reaper, s.hub, log, opts.Exec)
	return s
}

// Execs is the exec manager (signal forwarding and shutdown use it).
func (s *Server) Execs() *execmgr.Manager { return s.execs }

// Serve accepts streams from ln until ctx ends or ln fails; each is served on its own goroutine.
func (s *Server) Serve(ctx context.Context, ln net.Listener, kind string) error {
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	delay := 10 * time.Millisecond
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return ctx.Err()
			}
			// Temporary accept failures (EMFILE...) must not end serving: back off and retry.
			s.log.Warn("accept failed", "listener", kind, "error", err)
			time.Sleep(delay)
			delay = min(delay*2, time.Second)
			continue
		}
		delay = 10 * time.Millisecond
		go s.ServeConn(ctx, c, kind+":"+c.RemoteAddr().String())
	}
}

// ServeConn serves one stream until it ends, fails, or ctx ends. The stream is closed on return.
func (s *Server) ServeConn(ctx context.Context, rw io.ReadWriteCloser, name string) {
	// Registered first so it runs last, after the stream was closed and left the hub.
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("host stream handler panicked; stream closed", "stream", name, "panic", describePanic(v), "stack", string(debug.Stack()))
		}
	}()
	c := newConn(name, rw, s.opts.StallTimeout)
	defer c.close()
	go c.writeLoop()
	if !s.hub.add(c, s.opts.MaxStreams) {
		s.log.Warn("too many host streams; refusing one", "stream", name, "max", s.opts.MaxStreams)
		s.sendAndFlush(c, proto.ErrorFrame(proto.Errorf(0, proto.CodeTooManyStreams, "at most %d streams are served at once", s.opts.MaxStreams)))
		return
	}
	defer s.hub.remove(c)
	stop := context.AfterFunc(ctx, c.close)
	defer stop()
	s.log.Info("host stream open", "stream", name)
	defer s.log.Info("host stream closed", "stream", name)
	for {
		body, err := proto.ReadFrame(rw)
		if err != nil {
			var tooLarge *proto.FrameTooLargeError
			if errors.As(err, &tooLarge) {
				s.log.Warn("oversize frame; closing stream", "stream", name, "length", tooLarge.Length)
				s.sendAndFlush(c, proto.ErrorFrame(proto.Errorf(0, proto.CodeFrameTooLarge, "%s", err.Error())))
			}
			return
		}
		s.handle(ctx, c, body)
	}
}

// sendAndFlush queues a frame and waits (bounded) until it was written.
func (s *Server) sendAndFlush(c *conn, frame []byte) {
	flushed := make(chan struct{})
	if !c.send(outFrame{data: frame, flushed: flushed}) {
		return
	}
	select {
	case <-flushed:
	case <-time.After(s.opts.StallTimeout):
	}
}

// handle answers one request. A panic anywhere in it is contained here: PID 1 must not die (that
// panics the kernel), so it is logged, answered with an internal error, and the stream keeps serving.
func (s *Server) handle(ctx context.Context, c *conn, body []byte) {
	var id uint32
	typ := "(undecoded)"
	defer func() {
		if v := recover(); v != nil {
			// Never the request itself, nor a panic value that could quote it: env is secret.
			s.log.Error("request handler panicked; answered with an internal error",
				"stream", c.name, "id", id, "type", typ, "panic", describePanic(v), "stack", string(debug.Stack()))
			c.send(outFrame{data: proto.ErrorFrame(proto.Errorf(id, proto.CodeInternal, "the guest agent failed on this %s request (a bug); it keeps serving", typ))})
		}
	}()
	req, perr := proto.DecodeRequest(body)
	if perr != nil {
		s.log.Debug("rejected request", "stream", c.name, "code", perr.Code, "reason", perr.Message)
		c.send(outFrame{data: proto.ErrorFrame(perr)})
		return
	}
	id, typ = req.ID, req.Type
	if req.Type == proto.TypeExec {
		s.execRequests.Add(1)
		defer s.execRequests.Add(-1)
	}
	reply, perr := s.dispatch(ctx, req)
	if perr != nil {
		perr.ID = req.ID
		c.send(outFrame{data: proto.ErrorFrame(perr)})
		return
	}
	frame, err := proto.MarshalFrame(reply)
	if err != nil {
		c.send(outFrame{data: proto.ErrorFrame(proto.Errorf(req.ID, proto.CodeInternal, "cannot encode reply"))})
		return
	}
	if req.Type != proto.TypeShutdown {
		c.send(outFrame{data: frame})
		return
	}
	// The reply must reach the host before the machine goes away.
	s.sendAndFlush(c, frame)
	s.startShutdown(req.Shutdown.Mode, "requested")
}

func (s *Server) dispatch(ctx context.Context, req *proto.Request) (any, *proto.Error) {
	switch req.Type {
	case proto.TypeHello:
		for _, v := range req.Hello.Versions {
			if v == proto.Version {
				return proto.HelloReply{Header: proto.Reply(req), Versions: []int{proto.Version}, Agent: s.opts.Agent, Capabilities: Capabilities}, nil
			}
		}
		return nil, proto.Errorf(req.ID, proto.CodeUnsupportedVersion, "no common protocol version; this agent speaks %d", proto.Version)
	case proto.TypeConfigure:
		if s.shuttingDown.Load() {
			return nil, proto.Errorf(req.ID, proto.CodeShuttingDown, "the guest is shutting down")
		}
		if err := s.setRecordKey(req.Configure.RecordKey); err != nil {
			return nil, proto.Errorf(req.ID, proto.CodeConfigureFailed, "exit record key: %s", err.Error())
		}
		if err := s.opts.System.Configure(ctx, req.Configure); err != nil {
			s.log.Warn("configure failed", "error", err)
			return nil, proto.Errorf(req.ID, proto.CodeConfigureFailed, "%s", err.Error())
		}
		return proto.EmptyReply(req), nil
	case proto.TypeExec:
		if s.shuttingDown.Load() {
			// A known id still answers with its state: idempotency outranks shutdown.
			if st, ok := s.execs.Status(req.Exec.ExecID); ok {
				return proto.ExecReply{Header: proto.Reply(req), Started: false, ExecState: st}, nil
			}
			return nil, proto.Errorf(req.ID, proto.CodeShuttingDown, "the guest is shutting down")
		}
		st, started, perr := s.execs.Start(req.Exec)
		if perr != nil {
			return nil, perr
		}
		return proto.ExecReply{Header: proto.Reply(req), Started: started, ExecState: st}, nil
	case proto.TypeExecStatus:
		st, ok := s.execs.Status(req.ExecStatus.ExecID)
		if !ok {
			return nil, proto.Errorf(req.ID, proto.CodeNotFound, "no exec with id %s", req.ExecStatus.ExecID)
		}
		return proto.ExecStatusReply{Header: proto.Reply(req), ExecState: st}, nil
	case proto.TypeSignal:
		err := s.execs.Signal(req.Signal.ExecID, unix.SignalNum(req.Signal.Signal))
		if errors.Is(err, execmgr.ErrUnknownExec) {
			return nil, proto.Errorf(req.ID, proto.CodeNotFound, "no exec with id %s", req.Signal.ExecID)
		}
		if errors.Is(err, execmgr.ErrExecExited) {
			// Already exited: a successful no-op (docs/guest-protocol.md), so a retry is safe.
			s.log.Debug("signal not sent: exec already exited", "execId", req.Signal.ExecID, "signal", req.Signal.Signal)
			return proto.EmptyReply(req), nil
		}
		if err != nil {
			return nil, proto.Errorf(req.ID, proto.CodeInternal, "cannot signal exec: %v", err)
		}
		return proto.EmptyReply(req), nil
	case proto.TypeShutdown:
		return proto.EmptyReply(req), nil
	}
	return nil, proto.Errorf(req.ID, proto.CodeUnknownType, "unknown request type")
}

// setRecordKey keeps the boot's exit record key (first configure wins; the same key again is a no-op).
func (s *Server) setRecordKey(key []byte) error {
	if key == nil {
		return nil
	}
	if s.opts.Records == nil {
		return errors.New("this agent writes no exit records")
	}
	return s.opts.Records.SetKey(key)
}

// writeExitRecord puts the exec's authenticated exit record on the console (nothing without a key).
func (s *Server) writeExitRecord(execID string, code int, signal string) {
	if s.opts.Records == nil {
		return
	}
	if err := s.opts.Records.Write(exitrecord.Payload{ExecID: execID, ExitCode: code, Signal: signal}); err != nil {
		s.log.Warn("cannot write the exit record", "execId", execID, "error", err)
	}
}

// onExecExited shuts the guest down after an exec started with shutdownAfterExit, once the exec's
// reply and its exit event have been written to every connected stream (bounded).
func (s *Server) onExecExited(execID, shutdownMode string) {
	if shutdownMode == "" {
		return
	}
	// Its reply first (queued on the same streams the flush below drains), bounded.
	for deadline := time.Now().Add(s.opts.StallTimeout); s.execRequests.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	s.hub.Flush(s.opts.StallTimeout)
	s.startShutdown(shutdownMode, "exec "+execID+" exited")
}

// startShutdown runs the Shutdown hook once, whatever asked for it.
func (s *Server) startShutdown(mode, reason string) {
	if s.shuttingDown.CompareAndSwap(false, true) && s.opts.Shutdown != nil {
		s.log.Info("shutting down", "mode", mode, "reason", reason)
		go s.opts.Shutdown(mode)
	}
}

// ForwardSignal sends a signal the agent received (SIGTERM/SIGINT) to every running exec.
func (s *Server) ForwardSignal(sig syscall.Signal) { s.execs.SignalAll(sig) }

// describePanic names a recovered value without quoting data it might carry: runtime errors
// (nil dereference, index out of range) are safe to print; anything else is named by its type.
func describePanic(v any) string {
	if err, ok := v.(runtime.Error); ok {
		return err.Error()
	}
	return fmt.Sprintf("value of type %T", v)
}
