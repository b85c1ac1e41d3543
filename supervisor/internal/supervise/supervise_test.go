package supervise

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"imp.dev/supervisor/internal/procfs"
	"imp.dev/supervisor/internal/server"
)

// The test binary stands in for imp-supervisor: Run re-executes it as the first stage.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == ExecArg {
		ExecChild(os.Args[2:])
	}
	os.Exit(m.Run())
}

type pipeWriter struct{ w *os.File }

func (p pipeWriter) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p pipeWriter) Close() error                { return p.w.Close() }

type started struct {
	dir   string
	ready readyLine
	done  chan error
}

func start(t *testing.T, cfg Config) *started {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Self, cfg.Name, cfg.VMID = self, "vmm", "vm-1"
	if cfg.StopGrace == 0 {
		cfg.StopGrace = 5 * time.Second
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Ready = pipeWriter{w}
	s := &started{dir: cfg.Dir, done: make(chan error, 1)}
	go func() { s.done <- Run(cfg) }()
	line, err := bufio.NewReader(r).ReadBytes('\n')
	_ = r.Close()
	if err != nil {
		t.Fatalf("no ready line: %v", err)
	}
	if err := json.Unmarshal(line, &s.ready); err != nil {
		t.Fatalf("ready line %q: %v", line, err)
	}
	return s
}

func (s *started) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30 s")
		return nil
	}
}

func readExit(t *testing.T, dir string) ExitRecord {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ExitFile))
	if err != nil {
		t.Fatal(err)
	}
	var rec ExitRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

type client struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, dir string) *client {
	t.Helper()
	c, err := net.Dial("unix", filepath.Join(dir, SocketFile))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return &client{c: c, r: bufio.NewReader(c)}
}

func (k *client) next(t *testing.T) server.Message {
	t.Helper()
	line, err := k.r.ReadBytes('\n')
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	var m server.Message
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("message %q: %v", line, err)
	}
	return m
}

func (k *client) send(t *testing.T, line string) {
	t.Helper()
	if _, err := k.c.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
}

func TestRecordsAnExitStatusAndRemovesTheSocket(t *testing.T) {
	s := start(t, Config{Binary: "sh", Args: []string{"-c", "exit 7"}})
	if !s.ready.OK {
		t.Fatalf("ready: %+v", s.ready)
	}
	if err := s.wait(t); err != nil {
		t.Fatal(err)
	}
	rec := readExit(t, s.dir)
	if rec.Code == nil || *rec.Code != 7 || rec.Signal != nil {
		t.Fatalf("exit record %+v, want code 7 and no signal", rec)
	}
	if rec.Process != s.ready.Identity.Process || rec.VMID != "vm-1" {
		t.Fatalf("exit record names %+v of %q, want %+v of vm-1", rec.Process, rec.VMID, s.ready.Identity.Process)
	}
	if _, err := os.Stat(filepath.Join(s.dir, SocketFile)); !os.IsNotExist(err) {
		t.Fatalf("socket still there after exit (%v)", err)
	}
}

// replyAndExit reads the reply to a signal and then the exit event it causes, in that order: the
// server writes a reply before an exit event can close the connection (the reply was once lost to
// the close on a loaded machine).
func replyAndExit(t *testing.T, k *client) (reply, exit *server.Message) {
	t.Helper()
	r, e := k.next(t), k.next(t)
	if r.Type != "reply" || e.Type != "exit" {
		t.Fatalf("got %+v then %+v, want the signal's reply, then the exit event", r, e)
	}
	return &r, &e
}

func TestIdentityNamesBothProcessesByPidAndStartTime(t *testing.T) {
	s := start(t, Config{Binary: "sleep", Args: []string{"30"}})
	id := s.ready.Identity
	b, err := os.ReadFile(filepath.Join(s.dir, IdentityFile))
	if err != nil {
		t.Fatal(err)
	}
	var onDisk Identity
	if err := json.Unmarshal(b, &onDisk); err != nil || onDisk != *id {
		t.Fatalf("supervisor.json %+v (%v), want the ready line's %+v", onDisk, err, *id)
	}
	info, err := procfs.Stat(id.Process.Pid)
	if err != nil || info.StartTime != id.Process.StartTime {
		t.Fatalf("process %d start time %d (%v), identity says %d", id.Process.Pid, info.StartTime, err, id.Process.StartTime)
	}
	if id.Supervisor.Pid != os.Getpid() {
		t.Fatalf("supervisor pid %d, want %d", id.Supervisor.Pid, os.Getpid())
	}
	k := dial(t, s.dir)
	if m := k.next(t); m.Type != "hello" || m.Status.State != "running" || m.Status.Process != id.Process {
		t.Fatalf("hello %+v", m)
	}
	k.send(t, `{"op":"signal","signal":"SIGKILL","id":5}`)
	reply, exit := replyAndExit(t, k)
	if reply.OK == nil || !*reply.OK || reply.ID == nil || *reply.ID != 5 {
		t.Fatalf("reply %+v", *reply)
	}
	if exit.Status.State != "exited" || exit.Status.Exit.Signal == nil || *exit.Status.Exit.Signal != "SIGKILL" {
		t.Fatalf("exit event %+v", *exit)
	}
	if _, err := k.r.ReadByte(); err == nil {
		t.Fatal("connection still open after the exit event")
	}
	if err := s.wait(t); err != nil {
		t.Fatal(err)
	}
	if rec := readExit(t, s.dir); rec.Signal == nil || *rec.Signal != "SIGKILL" {
		t.Fatalf("exit record %+v, want SIGKILL", rec)
	}
}

func TestRejectsSignalsOutsideTheAllowedSetAndBadRequests(t *testing.T) {
	s := start(t, Config{Binary: "sleep", Args: []string{"30"}})
	k := dial(t, s.dir)
	k.next(t) // hello
	for _, line := range []string{`{"op":"signal","signal":"SIGSTOP"}`, `{"op":"reboot"}`, `not json`} {
		k.send(t, line)
		if m := k.next(t); m.Type != "reply" || m.OK == nil || *m.OK || m.Error == "" {
			t.Fatalf("%s: reply %+v, want a refusal", line, m)
		}
	}
	k.send(t, strings.Repeat("x", server.MaxLine+10))
	if m := k.next(t); m.OK == nil || *m.OK || !strings.Contains(m.Error, "longer") {
		t.Fatalf("overlong line: reply %+v", m)
	}
	if _, err := k.r.ReadByte(); err == nil {
		t.Fatal("connection still open after an overlong line")
	}
	k2 := dial(t, s.dir)
	k2.next(t)
	k2.send(t, `{"op":"status"}`)
	if m := k2.next(t); m.Status == nil || m.Status.State != "running" {
		t.Fatalf("status %+v, want running (a bad client must not affect the process)", m)
	}
	k2.send(t, `{"op":"signal","signal":"SIGTERM"}`)
	if _, m := replyAndExit(t, k2); m.Status.Exit.Signal == nil || *m.Status.Exit.Signal != "SIGTERM" {
		t.Fatalf("exit %+v", *m)
	}
	if err := s.wait(t); err != nil {
		t.Fatal(err)
	}
}

func TestBoundsConcurrentConnections(t *testing.T) {
	s := start(t, Config{Binary: "sleep", Args: []string{"30"}})
	for i := 0; i < server.MaxConns; i++ {
		dial(t, s.dir).next(t)
	}
	extra := dial(t, s.dir)
	if m := extra.next(t); m.OK == nil || *m.OK || !strings.Contains(m.Error, "too many") {
		t.Fatalf("connection %d: %+v, want a refusal", server.MaxConns+1, m)
	}
	_ = syscall.Kill(s.ready.Identity.Process.Pid, syscall.SIGKILL)
	if err := s.wait(t); err != nil {
		t.Fatal(err)
	}
}

func TestSigtermToTheSupervisorIsForwardedThenEscalated(t *testing.T) {
	// The process ignores SIGTERM, so only the SIGKILL after the grace period ends it.
	s := start(t, Config{Binary: "sh", Args: []string{"-c", "trap '' TERM; while :; do sleep 0.05; done"}, StopGrace: 300 * time.Millisecond})
	time.Sleep(100 * time.Millisecond) // let sh install its trap
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := s.wait(t); err != nil {
		t.Fatal(err)
	}
	if rec := readExit(t, s.dir); rec.Signal == nil || *rec.Signal != "SIGKILL" {
		t.Fatalf("exit record %+v, want SIGKILL after the grace period", rec)
	}
}

func TestFailsToStartAMissingProgramAndLeavesNothing(t *testing.T) {
	s := start(t, Config{Binary: "/nonexistent/vmm"})
	if s.ready.OK || !strings.Contains(s.ready.Error, "/nonexistent/vmm") {
		t.Fatalf("ready %+v, want a failure naming the binary", s.ready)
	}
	if err := s.wait(t); err == nil {
		t.Fatal("Run succeeded")
	}
	for _, f := range []string{SocketFile, IdentityFile, ExitFile} {
		if _, err := os.Stat(filepath.Join(s.dir, f)); !os.IsNotExist(err) {
			t.Errorf("%s left behind (%v)", f, err)
		}
	}
}

func TestRefusesADirectoryWithAnUncollectedExit(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ExitFile), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := start(t, Config{Dir: dir, Binary: "sleep", Args: []string{"30"}})
	if s.ready.OK || !strings.Contains(s.ready.Error, "nobody collected") {
		t.Fatalf("ready %+v, want a refusal", s.ready)
	}
	_ = s.wait(t)
}

func TestRefusesASecondSupervisorInTheSameDirectory(t *testing.T) {
	first := start(t, Config{Binary: "sleep", Args: []string{"30"}})
	second := start(t, Config{Dir: first.dir, Binary: "sleep", Args: []string{"30"}})
	if second.ready.OK || !strings.Contains(second.ready.Error, "another supervisor") {
		t.Fatalf("second ready %+v, want a refusal", second.ready)
	}
	_ = second.wait(t)
	k := dial(t, first.dir)
	if m := k.next(t); m.Status.State != "running" {
		t.Fatalf("first supervisor's status %+v after the refused second one", m)
	}
	_ = syscall.Kill(first.ready.Identity.Process.Pid, syscall.SIGKILL)
	if err := first.wait(t); err != nil {
		t.Fatal(err)
	}
}

// A process that died but is not yet reaped is a zombie; the status must not call it running, or an
// agent adopts a VM whose backend is dead (seen on a loaded machine, where the reaping goroutine ran late).
func TestStatusOfAZombieWaitsForItsExitToBeRecorded(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() }()
	s := &supervisor{cmd: cmd, recorded: make(chan struct{}), status: server.Status{State: "running"}}
	if st := s.Status(); st.State != "running" {
		t.Fatalf("live process: state %q", st.State)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !isZombie(cmd.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatal("the killed process never became a zombie")
		}
		time.Sleep(5 * time.Millisecond)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		s.mu.Lock()
		s.status.State = "exited"
		s.mu.Unlock()
		close(s.recorded)
	}()
	if st := s.Status(); st.State != "exited" {
		t.Fatalf("zombie: state %q, want the recorded exit", st.State)
	}
}

func TestNotRunningCoversZombieReapedAndReusedPids(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	info, err := procfs.Stat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if notRunning(pid, info.StartTime) {
		t.Fatal("a live process counts as not running")
	}
	if !notRunning(pid, info.StartTime+1) {
		t.Fatal("a pid with another start time (reused) counts as running")
	}
	_ = cmd.Process.Kill()
	_, _ = cmd.Process.Wait()
	if !notRunning(pid, info.StartTime) {
		t.Fatal("a reaped process counts as running")
	}
}

func TestStatusOfGivesUpWaitingAtItsBound(t *testing.T) {
	running := func() server.Status { return server.Status{State: "running"} }
	began := time.Now()
	if st := statusOf(running, func() bool { return true }, make(chan struct{}), 20*time.Millisecond); st.State != "running" {
		t.Fatalf("state %q", st.State)
	}
	if waited := time.Since(began); waited < 20*time.Millisecond {
		t.Fatalf("returned after %v, before its bound", waited)
	}
	// A live process is answered at once: the channel is never read.
	if st := statusOf(running, func() bool { return false }, nil, time.Hour); st.State != "running" {
		t.Fatalf("state %q", st.State)
	}
}

func TestKillsTheProcessOnceItsBoundedFilePassesTheBound(t *testing.T) {
	dir := t.TempDir()
	console := filepath.Join(dir, "console.log")
	// Writes without end to its stdout, which is appended to the bounded file: a guest flooding its console.
	s := start(t, Config{Dir: dir, Binary: "sh", Args: []string{"-c", "while :; do echo flooding the console with one more line of text; done"}, Stdout: console, Bound: &FileBound{Path: console, MaxBytes: 256 * 1024, Interval: 20 * time.Millisecond}})
	if !s.ready.OK {
		t.Fatalf("ready: %+v", s.ready)
	}
	if err := s.wait(t); err != nil {
		t.Fatal(err)
	}
	rec := readExit(t, dir)
	if rec.Signal == nil || *rec.Signal != "SIGKILL" {
		t.Fatalf("exit record %+v, want SIGKILL", rec)
	}
	if rec.FileBound == nil || rec.FileBound.Path != console || rec.FileBound.MaxBytes != 256*1024 || rec.FileBound.Bytes <= 256*1024 {
		t.Fatalf("exit record's fileBound %+v, want the console over 256 KiB", rec.FileBound)
	}
	info, err := os.Stat(console)
	if err != nil {
		t.Fatal(err)
	}
	// The overshoot is what the loop writes between two checks and the kill, not unbounded.
	if info.Size() > 64*1024*1024 {
		t.Fatalf("the console grew to %d bytes after its bound", info.Size())
	}
}

func TestABoundNotReachedLeavesTheExitAlone(t *testing.T) {
	dir := t.TempDir()
	console := filepath.Join(dir, "console.log")
	s := start(t, Config{Dir: dir, Binary: "sh", Args: []string{"-c", "echo a few bytes; exit 3"}, Stdout: console, Bound: &FileBound{Path: console, MaxBytes: 1024, Interval: 5 * time.Millisecond}})
	if err := s.wait(t); err != nil {
		t.Fatal(err)
	}
	rec := readExit(t, dir)
	if rec.Code == nil || *rec.Code != 3 || rec.FileBound != nil {
		t.Fatalf("exit record %+v, want code 3 and no fileBound", rec)
	}
}
