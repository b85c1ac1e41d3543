// Package execmgr runs workload processes for the guest protocol: exec idempotent by id, output
// pumping, exit reporting through the Reaper, signal forwarding, and shutdown of every exec.
package execmgr

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"imp.dev/guest/internal/proto"
)

// Publisher delivers events to every connected host stream. It may block (bounded) for backpressure.
type Publisher interface {
	Publish(event any)
}

// Options configure a Manager.
type Options struct {
	// MaxExecs bounds how many exec ids are remembered. Default 1024.
	MaxExecs int
	// DrainTimeout bounds how long the exit event waits for the output pipes after the process
	// exited (background processes may hold them open). Default 2 s.
	DrainTimeout time.Duration
	// Exited, if set, is called (on its own goroutine) after an exec's exit event was published
	// and its state became exited, with the shutdownAfterExit mode of the request that started it.
	Exited func(execID, shutdownMode string)
	// Record, if set, is called once per exec that exited, before its exit event is published and
	// before its state turns exited, so the authenticated exit record is on the console by the time
	// anyone can learn of the exit (docs/guest-protocol.md, "Exit records").
	Record func(execID string, exitCode int, signal string)
}

// Manager owns every exec of this boot. Safe for concurrent use.
type Manager struct {
	mu       sync.Mutex
	execs    map[string]*execRecord
	closing  bool
	reaper   *Reaper
	pub      Publisher
	log      *slog.Logger
	maxExecs int
	drain    time.Duration
	exited   func(execID, shutdownMode string)
	record   func(execID string, exitCode int, signal string)
}

type execRecord struct {
	state    string // proto.StateRunning | StateExited | StateFailed
	pid      int
	pidfd    int // pidfd of the leader, owned; -1 once closed (at reap) or if none. Guarded by Manager.mu
	exitCode int
	signal   string
	err      string
	reaped   bool          // the leader was reaped: never signal its pid again (it may be reused)
	shutdown string        // shutdownAfterExit of the starting request ("" = none)
	done     chan struct{} // closed when state leaves running
}

// NewManager builds a Manager. The reaper must be running (Reaper.Run) for exits to be seen.
func NewManager(reaper *Reaper, pub Publisher, log *slog.Logger, opts Options) *Manager {
	if opts.MaxExecs <= 0 {
		opts.MaxExecs = 1024
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = 2 * time.Second
	}
	return &Manager{execs: map[string]*execRecord{}, reaper: reaper, pub: pub, log: log, maxExecs: opts.MaxExecs, drain: opts.DrainTimeout, exited: opts.Exited, record: opts.Record}
}

// Start starts the exec unless its id is known. The id is recorded before the process starts, and
// the manager lock is held until the record is final, so concurrent requests with one id see
// exactly one start. Returns the state and whether this call started the process. A process that
// cannot be started is recorded as failed (not an error). Errors are protocol errors only
// (too many execs, shutting down).
func (m *Manager) Start(req *proto.ExecRequest) (proto.ExecState, bool, *proto.Error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rec, ok := m.execs[req.ExecID]; ok {
		return rec.snapshot(req.ExecID), false, nil
	}
	if m.closing {
		return proto.ExecState{}, false, proto.Errorf(0, proto.CodeShuttingDown, "the guest is shutting down")
	}
	if len(m.execs) >= m.maxExecs {
		return proto.ExecState{}, false, proto.Errorf(0, proto.CodeTooManyExecs, "%d exec ids already recorded", m.maxExecs)
	}
	rec := &execRecord{state: proto.StateRunning, pidfd: -1, done: make(chan struct{})}
	if req.ShutdownAfterExit != nil {
		rec.shutdown = *req.ShutdownAfterExit
	}
	m.execs[req.ExecID] = rec // recorded before the process exists: the ambiguous-handoff rule
	// Log only what cannot carry the secret: never env values, never argv beyond argv[0].
	m.log.Info("exec starting", "execId", req.ExecID, "argv0", req.Argv[0], "args", len(req.Argv), "envKeys", len(req.Env))
	if err := m.spawn(req, rec); err != nil {
		rec.state = proto.StateFailed
		rec.err = err.Error()
		close(rec.done)
		m.log.Warn("exec failed to start", "execId", req.ExecID, "error", rec.err)
		return rec.snapshot(req.ExecID), false, nil
	}
	m.log.Info("exec started", "execId", req.ExecID, "pid", rec.pid)
	return rec.snapshot(req.ExecID), true, nil
}

// spawn forks the process with its pipes; called with m.mu held.
func (m *Manager) spawn(req *proto.ExecRequest, rec *execRecord) error {
	path, err := lookPath(req.Argv[0], req.Env)
	if err != nil {
		return err
	}
	cwd := "/"
	if req.Cwd != nil {
		cwd = *req.Cwd
	}
	env := make([]string, 0, len(req.Env))
	for k, v := range req.Env {
		env = append(env, k+"="+v)
	}
	stdin, err := stdinFor(req.StdinBytes)
	if err != nil {
		return err
	}
	defer stdin.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return err
	}
	// The pidfd comes from the fork itself (CLONE_PIDFD, close-on-exec), so it can only ever refer
	// to this child. It is owned by the record and closed when the leader is reaped (onExit).
	pidfd := -1
	attr := &syscall.ProcAttr{
		Dir:   cwd,
		Env:   env,
		Files: []uintptr{stdin.Fd(), outW.Fd(), errW.Fd()},
		Sys:   &syscall.SysProcAttr{Setsid: true, PidFD: &pidfd},
	}
	if req.UID != nil && req.GID != nil { // validation guarantees both or neither
		attr.Sys.Credential = &syscall.Credential{Uid: *req.UID, Gid: *req.GID, Groups: []uint32{}}
	}
	pumps := &sync.WaitGroup{}
	pid, err := m.reaper.Start(func() (int, error) {
		pid, _, err := syscall.StartProcess(path, req.Argv, attr)
		if err != nil {
			return 0, &os.PathError{Op: "fork/exec", Path: path, Err: err}
		}
		rec.pidfd = pidfd
		return pid, nil
	}, func(ws syscall.WaitStatus) { m.onExit(req.ExecID, rec, ws, pumps, outR, errR) })
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return err
	}
	rec.pid = pid
	pumps.Add(2)
	go m.pump(req.ExecID, "stdout", outR, pumps)
	go m.pump(req.ExecID, "stderr", errR, pumps)
	return nil
}

// Status returns the state of an exec, or false if the id is unknown.
func (m *Manager) Status(execID string) (proto.ExecState, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.execs[execID]
	if !ok {
		return proto.ExecState{}, false
	}
	return rec.snapshot(execID), true
}

// StopAccepting makes later Start calls fail with shutting_down.
func (m *Manager) StopAccepting() {
	m.mu.Lock()
	m.closing = true
	m.mu.Unlock()
}

// WaitAll blocks until every exec has left the running state or ctx ends; reports whether all did.
func (m *Manager) WaitAll(ctx context.Context) bool {
	m.mu.Lock()
	var pending []chan struct{}
	for _, rec := range m.execs {
		pending = append(pending, rec.done)
	}
	m.mu.Unlock()
	for _, ch := range pending {
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

func (r *execRecord) snapshot(execID string) proto.ExecState {
	s := proto.ExecState{ExecID: execID, State: r.state, PID: r.pid, Error: r.err}
	if r.state == proto.StateExited {
		code := r.exitCode
		s.ExitCode = &code
		s.Signal = r.signal
	}
	return s
}

// stdinFor is the read end of a pipe holding data, its write end already closed, so the process
// reads data once and then EOF; without data, /dev/null. data fits the pipe (MaxStdinBytes), so the
// write cannot block on a reader that never comes.
func stdinFor(data []byte) (*os.File, error) {
	if data == nil {
		return os.Open(os.DevNull)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	_, err = w.Write(data)
	if closeErr := w.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}
