// Package supervise runs one process for its whole life as its parent: it puts the process in its own
// cgroup before exec, serves the control socket, records the exit atomically in exit.json, then
// removes the cgroup and the socket. The supervisor is started detached (own session) by the node
// agent, so the process outlives an agent restart; the process itself dies with the supervisor
// (PR_SET_PDEATHSIG), because a process nobody can reap would lose its exit status.
package supervise

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"imp.dev/supervisor/internal/atomicfile"
	"imp.dev/supervisor/internal/cgroup"
	"imp.dev/supervisor/internal/procfs"
	"imp.dev/supervisor/internal/server"
)

// Files in the supervision directory.
const (
	SocketFile   = "sock"
	IdentityFile = "supervisor.json"
	ExitFile     = "exit.json"
	LockFile     = "supervisor.lock"
)

// Config is one supervised process.
type Config struct {
	Dir, Name, VMID string
	Binary          string
	Args            []string
	Stdout, Stderr  string
	Cwd             string
	// Cgroup, when set, is created for the process (Group and Leaf filled in from VMID and Name).
	Cgroup *cgroup.Config
	// StopGrace is how long a SIGTERM sent to the supervisor itself is given before SIGKILL.
	StopGrace time.Duration
	// Bound, when set, caps a file the process writes (its console log): past it the process is killed.
	Bound *FileBound
	// Ready receives one JSON line once the process runs (or why it could not start), then is closed.
	Ready io.WriteCloser
	// Self is the supervisor's own executable, re-run as the process's first stage.
	Self string
	Logf func(format string, args ...any)
}

// Identity is supervisor.json: who supervises which process. The agent re-adopts only a supervisor
// whose pid, start time and boot id all match, never by pid alone.
type Identity struct {
	Version    int               `json:"version"`
	Name       string            `json:"name"`
	VMID       string            `json:"vmId"`
	BootID     string            `json:"bootId"`
	Supervisor server.ProcessRef `json:"supervisor"`
	Process    server.ProcessRef `json:"process"`
	Socket     string            `json:"socket"`
	CgroupMode string            `json:"cgroupMode,omitempty"`
	Cgroup     string            `json:"cgroup,omitempty"`
	StartedAt  string            `json:"startedAt"`
}

// ExitRecord is exit.json.
type ExitRecord struct {
	server.Exit
	Name    string            `json:"name"`
	VMID    string            `json:"vmId"`
	BootID  string            `json:"bootId"`
	Process server.ProcessRef `json:"process"`
}

type readyLine struct {
	OK       bool      `json:"ok"`
	Error    string    `json:"error,omitempty"`
	Identity *Identity `json:"identity,omitempty"`
}

type supervisor struct {
	cfg    Config
	cmd    *exec.Cmd
	mu     sync.Mutex
	status server.Status
	// recorded is closed once the process is reaped and its exit is in status.
	recorded chan struct{}
}

// zombieWait bounds how long a status answer waits for an exit the kernel already knows of.
const zombieWait = 5 * time.Second

// Status answers what the kernel knows, not only what this supervisor has recorded: between the
// process's death and the wait below returning (a scheduling delay, long on a loaded machine) the
// process is a zombie, and "running" would let an agent adopt a VM whose backend is already dead.
// The pid is ours until we reap it, so reading its stat cannot name another process.
// Once reaped (the wait below has returned but not yet recorded), the pid names no process of ours:
// no process at all, or a new one with another start time; both are dead too.
func (s *supervisor) Status() server.Status {
	return statusOf(s.snapshot, func() bool { return notRunning(s.cmd.Process.Pid, s.snapshot().Process.StartTime) }, s.recorded, zombieWait)
}

func (s *supervisor) snapshot() server.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

// statusOf returns the recorded status, first waiting (at most wait) for an exit still being
// recorded when the process is already dead.
func statusOf(snapshot func() server.Status, dead func() bool, recorded <-chan struct{}, wait time.Duration) server.Status {
	st := snapshot()
	if st.State != "running" || !dead() {
		return st
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-recorded:
	case <-t.C:
	}
	return snapshot()
}

func isZombie(pid int) bool {
	info, err := procfs.Stat(pid)
	return err == nil && info.State == 'Z'
}

// notRunning: the process that started at startTime is a zombie, reaped, or replaced by another.
func notRunning(pid int, startTime uint64) bool {
	info, err := procfs.Stat(pid)
	return err != nil || info.State == 'Z' || info.StartTime != startTime
}

func (s *supervisor) Signal(name string) error {
	sig, err := parseSignal(name)
	if err != nil {
		return err
	}
	s.deliver(sig)
	return nil
}

// deliver signals the process unless it has been reaped. os.Process signals through a pidfd, so a
// reused pid can never receive it.
func (s *supervisor) deliver(sig syscall.Signal) {
	select {
	case <-s.recorded:
		return
	default:
	}
	if err := s.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.cfg.Logf("cannot send %s to pid %d: %v", signalName(sig), s.cmd.Process.Pid, err)
	}
}

// Run supervises cfg's process until it has exited and everything is recorded and removed. It
// returns an error if the process could not be started (then nothing is left behind) or if the exit
// could not be recorded.
func Run(cfg Config) (err error) {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	ready := func(line readyLine) {
		if cfg.Ready == nil {
			return
		}
		b, _ := json.Marshal(line)
		_, _ = cfg.Ready.Write(append(b, '\n'))
		_ = cfg.Ready.Close()
		cfg.Ready = nil
	}
	defer func() {
		if err != nil {
			ready(readyLine{OK: false, Error: err.Error()})
		}
	}()

	lock, err := os.OpenFile(filepath.Join(cfg.Dir, LockFile), os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("cannot open lock: %w", err)
	}
	// Held for the supervisor's life and released by the kernel when it dies, however it dies.
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fmt.Errorf("another supervisor is running in %s", cfg.Dir)
	}
	if _, err := os.Stat(filepath.Join(cfg.Dir, ExitFile)); err == nil {
		return fmt.Errorf("%s holds an exit status nobody collected; remove it first", filepath.Join(cfg.Dir, ExitFile))
	}
	sock := filepath.Join(cfg.Dir, SocketFile)
	_ = os.Remove(sock) // left by a supervisor that was killed; we hold the lock, so it is not in use
	_ = os.Remove(filepath.Join(cfg.Dir, IdentityFile))
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w", sock, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	defer func() {
		if err != nil {
			_ = ln.Close()
		}
	}()
	if err := os.Chmod(sock, 0o600); err != nil {
		return err
	}

	var cg *cgroup.Cgroup
	procs := "-"
	if cfg.Cgroup != nil {
		// Out of the starter's cgroups first (an agent Pod's container), so that stopping the
		// container does not stop this VM; the process inherits the roots and joins its memory leaf.
		if _, err := cgroup.Escape(cfg.Cgroup.Root); err != nil && cfg.Logf != nil {
			cfg.Logf("could not leave every cgroup of the process that started the supervisor (the VM may stop with it): %v", err)
		}
		c := *cfg.Cgroup
		c.Group, c.Leaf = cfg.VMID, cfg.Name
		if cg, err = cgroup.Create(c); err != nil {
			return fmt.Errorf("cannot create cgroup: %w", err)
		}
		procs = cg.ProcsFile()
		defer func() {
			if err != nil {
				_ = cg.KillAll(5 * time.Second)
				_ = cg.Remove()
			}
		}()
	}

	s := &supervisor{cfg: cfg, recorded: make(chan struct{})}
	if err := s.start(procs); err != nil {
		return err
	}
	bootID, _ := procfs.BootID()
	self, err := procfs.Stat(os.Getpid())
	if err != nil {
		return err
	}
	child, err := procfs.Stat(s.cmd.Process.Pid)
	if err != nil {
		return err
	}
	startedAt := time.Now().UTC().Format(time.RFC3339Nano)
	id := Identity{
		Version: 1, Name: cfg.Name, VMID: cfg.VMID, BootID: bootID,
		Supervisor: server.ProcessRef{Pid: os.Getpid(), StartTime: self.StartTime},
		Process:    server.ProcessRef{Pid: s.cmd.Process.Pid, StartTime: child.StartTime},
		Socket:     sock, StartedAt: startedAt,
	}
	if cg != nil {
		id.CgroupMode, id.Cgroup = string(cg.Mode), cg.Path
	}
	s.status = server.Status{Name: cfg.Name, VMID: cfg.VMID, State: "running", Process: id.Process, Supervisor: id.Supervisor, StartedAt: startedAt}
	if err := atomicfile.WriteJSON(filepath.Join(cfg.Dir, IdentityFile), id); err != nil {
		_ = s.cmd.Process.Kill()
		_, _ = s.cmd.Process.Wait()
		return fmt.Errorf("cannot write identity: %w", err)
	}

	srv := server.New(ln, s)
	go srv.Serve()
	stopSignals := s.forwardSignals()
	var bound *boundWatch
	if cfg.Bound != nil {
		bound = watchBound(*cfg.Bound, func() { s.deliver(syscall.SIGKILL) }, cfg.Logf)
	}
	ready(readyLine{OK: true, Identity: &id})
	cfg.Logf("started %s pid %d", cfg.Binary, id.Process.Pid)

	state, werr := s.cmd.Process.Wait()
	at := time.Now().UTC().Format(time.RFC3339Nano)
	stopSignals()
	exit := server.Exit{At: at}
	if werr != nil {
		cfg.Logf("wait: %v", werr)
	}
	if state != nil {
		ws := state.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			exit.Signal = ptr(signalName(ws.Signal()))
		} else {
			exit.Code = ptr(ws.ExitStatus())
		}
	}
	if cg != nil {
		exit.Memory = memoryUse(cg)
	}
	if bound != nil {
		if size := bound.finish(); size != nil {
			exit.FileBound = &server.FileBoundExceeded{Path: cfg.Bound.Path, Bytes: *size, MaxBytes: cfg.Bound.MaxBytes}
		}
	}
	s.mu.Lock()
	s.status.State = "exited"
	s.status.Exit = &exit
	final := s.status
	s.mu.Unlock()
	close(s.recorded)
	cfg.Logf("pid %d exited: code %v signal %v", id.Process.Pid, deref(exit.Code), deref(exit.Signal))

	var errs []error
	if cg != nil {
		// Whatever the process started dies with it, so the cgroup can go and nothing outlives the VM.
		if kerr := cg.KillAll(5 * time.Second); kerr != nil {
			errs = append(errs, kerr)
		}
	}
	record := ExitRecord{Exit: exit, Name: cfg.Name, VMID: cfg.VMID, BootID: bootID, Process: id.Process}
	if rerr := atomicfile.WriteJSON(filepath.Join(cfg.Dir, ExitFile), record); rerr != nil {
		errs = append(errs, fmt.Errorf("cannot record exit: %w", rerr))
	}
	srv.Shutdown(final)
	if cg != nil {
		if cerr := cg.Remove(); cerr != nil {
			errs = append(errs, cerr)
		}
	}
	if len(errs) > 0 {
		for _, e := range errs {
			cfg.Logf("%v", e)
		}
		return errors.Join(errs...)
	}
	return nil
}

// start runs the first stage (ExecChild) and waits until it has exec'ed the program or failed to.
func (s *supervisor) start(procs string) error {
	stdout, err := openLog(s.cfg.Stdout)
	if err != nil {
		return err
	}
	defer stdout.Close()
	stderr, err := openLog(s.cfg.Stderr)
	if err != nil {
		return err
	}
	defer stderr.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := exec.Command(s.cfg.Self, append([]string{ExecArg, procs, s.cfg.Binary}, s.cfg.Args...)...)
	cmd.Stdout, cmd.Stderr, cmd.Dir = stdout, stderr, s.cfg.Cwd
	cmd.ExtraFiles = []*os.File{w}
	// Own process group: a signal to the supervisor's group (a terminal's ^C) does not reach the
	// process directly; the supervisor decides what to forward. Pdeathsig: see the package comment.
	// The parent "thread" for Pdeathsig is the main thread, locked in main, which lives as long as we do.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	_ = w.Close()
	if err != nil {
		return fmt.Errorf("cannot start %s: %w", s.cfg.Binary, err)
	}
	msg, _ := io.ReadAll(io.LimitReader(r, 4096))
	if len(msg) > 0 {
		_ = cmd.Wait()
		return fmt.Errorf("cannot start %s: %s", s.cfg.Binary, msg)
	}
	s.cmd = cmd
	return nil
}

// forwardSignals turns SIGTERM or SIGINT sent to the supervisor into a SIGTERM for the process and,
// after StopGrace, a SIGKILL: the supervisor outlives its process so the exit is always recorded.
func (s *supervisor) forwardSignals() (stop func()) {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	done := make(chan struct{})
	go func() {
		var kill <-chan time.Time
		for {
			select {
			case sig := <-ch:
				s.cfg.Logf("received %v: forwarding SIGTERM, SIGKILL in %v", sig, s.cfg.StopGrace)
				s.deliver(syscall.SIGTERM)
				if kill == nil {
					kill = time.After(s.cfg.StopGrace)
				}
			case <-kill:
				s.deliver(syscall.SIGKILL)
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

func openLog(path string) (*os.File, error) {
	if path == "" {
		return os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cannot open %s: %w", path, err)
	}
	return f, nil
}

func ptr[T any](v T) *T { return &v }

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// memoryUse reads the cgroup's account before anything else touches it; nil if the kernel gives no
// OOM count (then nothing can be said of it).
func memoryUse(cg *cgroup.Cgroup) *server.MemoryUse {
	kills, err := cg.OOMKills()
	if err != nil {
		return nil
	}
	return &server.MemoryUse{OOMKilled: kills > 0, PeakBytes: cg.PeakBytes(), LimitBytes: cg.LimitBytes()}
}
