package execmgr

import (
	"bytes"
	"context"
	"encoding/base64"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"imp.dev/guest/internal/proto"
)

// One reaper per test process: two reapers would steal each other's children.
var (
	testReaper *Reaper
	testLog    = &syncBuffer{}
)

func TestMain(m *testing.M) {
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	testReaper = NewReaper(slog.New(slog.NewTextHandler(testLog, &slog.HandlerOptions{Level: slog.LevelDebug})))
	ctx, cancel := context.WithCancel(context.Background())
	go testReaper.Run(ctx)
	code := m.Run()
	cancel()
	os.Exit(code)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// recorder is a Publisher that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []any
	exits  chan proto.ExitEvent
}

func newRecorder() *recorder { return &recorder{exits: make(chan proto.ExitEvent, 1024)} }

func (r *recorder) Publish(e any) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	if x, ok := e.(proto.ExitEvent); ok {
		r.exits <- x
	}
}

func (r *recorder) output(execID, stream string) ([]byte, []proto.OutputEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var all []byte
	var chunks []proto.OutputEvent
	for _, e := range r.events {
		if o, ok := e.(proto.OutputEvent); ok && o.ExecID == execID && o.Stream == stream {
			b, _ := base64.StdEncoding.DecodeString(o.Data)
			all = append(all, b...)
			chunks = append(chunks, o)
		}
	}
	return all, chunks
}

func (r *recorder) waitExit(t *testing.T, execID string) proto.ExitEvent {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case x := <-r.exits:
			if x.ExecID == execID {
				return x
			}
		case <-timeout:
			t.Fatalf("no exit event for %s", execID)
		}
	}
}

func newManager(t *testing.T) (*Manager, *recorder) {
	t.Helper()
	rec := newRecorder()
	log := slog.New(slog.NewTextHandler(testLog, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return NewManager(testReaper, rec, log, Options{}), rec
}

func sh(id, script string) *proto.ExecRequest {
	return &proto.ExecRequest{ExecID: id, Argv: []string{"/bin/sh", "-c", script}, Env: map[string]string{"PATH": "/usr/bin:/bin"}}
}

func TestStartRunsTheProcessAndReportsOutputThenExit(t *testing.T) {
	m, rec := newManager(t)
	st, started, perr := m.Start(sh("out-1", "echo hello; echo oops >&2; exit 7"))
	if perr != nil || !started || st.State != proto.StateRunning || st.PID <= 0 {
		t.Fatalf("Start = %+v, %v, %v", st, started, perr)
	}
	exit := rec.waitExit(t, "out-1")
	if exit.ExitCode != 7 || exit.Signal != "" {
		t.Fatalf("exit = %+v", exit)
	}
	if out, _ := rec.output("out-1", "stdout"); string(out) != "hello\n" {
		t.Fatalf("stdout = %q", out)
	}
	if out, _ := rec.output("out-1", "stderr"); string(out) != "oops\n" {
		t.Fatalf("stderr = %q", out)
	}
	st, ok := m.Status("out-1")
	if !ok || st.State != proto.StateExited || st.ExitCode == nil || *st.ExitCode != 7 {
		t.Fatalf("Status = %+v", st)
	}
}

func TestStartWithAKnownIDNeverStartsASecondProcess(t *testing.T) {
	m, rec := newManager(t)
	marker := filepath.Join(t.TempDir(), "starts")
	req := sh("once", "echo started >> "+marker+"; sleep 0.3")
	var wg sync.WaitGroup
	var mu sync.Mutex
	startedCount := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, started, perr := m.Start(req)
			if perr != nil {
				t.Error(perr)
			}
			if started {
				mu.Lock()
				startedCount++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	rec.waitExit(t, "once")
	st, started, _ := m.Start(req)
	if started || st.State != proto.StateExited {
		t.Fatalf("after exit: %+v started=%v", st, started)
	}
	b, _ := os.ReadFile(marker)
	if startedCount != 1 || strings.Count(string(b), "started") != 1 {
		t.Fatalf("started %d times by reply, %d times by marker", startedCount, strings.Count(string(b), "started"))
	}
}

func TestStartRecordsAFailureAndNeverRetriesIt(t *testing.T) {
	m, _ := newManager(t)
	req := &proto.ExecRequest{ExecID: "bad", Argv: []string{"/nonexistent/program"}, Env: map[string]string{}}
	st, started, perr := m.Start(req)
	if perr != nil || started || st.State != proto.StateFailed || !strings.Contains(st.Error, "no such file") {
		t.Fatalf("Start = %+v, %v, %v", st, started, perr)
	}
	req.Argv = []string{"/bin/true"}
	st, started, _ = m.Start(req)
	if started || st.State != proto.StateFailed {
		t.Fatalf("a failed id was started again: %+v", st)
	}
}

func TestStartHonoursEnvCwdUIDAndGID(t *testing.T) {
	m, rec := newManager(t)
	// t.TempDir's parent is private to root; the exec's uid must be able to enter its cwd.
	dir, err := os.MkdirTemp("", "imp-exec-cwd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	uid, gid := uint32(65534), uint32(65533)
	req := &proto.ExecRequest{
		ExecID: "creds", Argv: []string{"sh", "-c", `echo "$FOO|$(pwd)|$(id -u)|$(id -g)|$(id -G)|${HOME-unset}"`},
		Env: map[string]string{"FOO": "bar baz", "PATH": "/usr/bin:/bin"}, Cwd: &dir, UID: &uid, GID: &gid,
	}
	if st, _, perr := m.Start(req); perr != nil || st.State != proto.StateRunning {
		t.Fatalf("Start = %+v, %v", st, perr)
	}
	rec.waitExit(t, "creds")
	out, _ := rec.output("creds", "stdout")
	want := "bar baz|" + dir + "|65534|65533|65533|unset\n"
	if string(out) != want {
		t.Fatalf("got %q, want %q", out, want)
	}
}

func TestOutputIsChunkedAtMost32KiBInSequence(t *testing.T) {
	m, rec := newManager(t)
	if _, _, perr := m.Start(sh("big", "head -c 300000 /dev/zero | tr '\\0' x")); perr != nil {
		t.Fatal(perr)
	}
	rec.waitExit(t, "big")
	out, chunks := rec.output("big", "stdout")
	if len(out) != 300000 || strings.Trim(string(out), "x") != "" {
		t.Fatalf("got %d bytes", len(out))
	}
	for i, c := range chunks {
		raw, _ := base64.StdEncoding.DecodeString(c.Data)
		if c.Seq != uint64(i) || len(raw) == 0 || len(raw) > proto.MaxOutputChunk {
			t.Fatalf("chunk %d: seq %d, %d bytes", i, c.Seq, len(raw))
		}
	}
}

func TestSignalReachesTheProcessGroupAndIsANoOpAfterExit(t *testing.T) {
	m, rec := newManager(t)
	pidFile := filepath.Join(t.TempDir(), "bg.pid")
	if _, _, perr := m.Start(sh("sig", "sleep 30 >/dev/null 2>&1 & echo $! >"+pidFile+"; wait")); perr != nil {
		t.Fatal(perr)
	}
	bg := openPidfd(t, readPid(t, pidFile)) // the shell's child, in the exec's process group
	defer unix.Close(bg)
	if err := m.Signal("sig", syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exit := rec.waitExit(t, "sig")
	if exit.Signal != "SIGTERM" || exit.ExitCode != 128+15 {
		t.Fatalf("exit = %+v", exit)
	}
	waitGone(t, bg) // the group member got the signal too
	if err := m.Signal("sig", syscall.SIGKILL); err != ErrExecExited {
		t.Fatalf("signal after exit: %v", err)
	}
	if err := m.Signal("nope", syscall.SIGKILL); err != ErrUnknownExec {
		t.Fatalf("unknown id: %v", err)
	}
}

func TestExitIsNotHeldUpByABackgroundProcessHoldingThePipe(t *testing.T) {
	rec := newRecorder()
	log := slog.New(slog.NewTextHandler(testLog, nil))
	// The drain bound is the default (2 s), not a short one: on a loaded machine a short bound can end
	// before the pump was scheduled to read "done", which would be the test's flake, not the agent's.
	// The background sleep outlives every wait here, so an exit that waited for it would time out.
	m := NewManager(testReaper, rec, log, Options{})
	st, _, perr := m.Start(sh("bg", "sleep 600 & echo done"))
	if perr != nil {
		t.Fatal(perr)
	}
	t.Cleanup(func() { _ = syscall.Kill(-st.PID, syscall.SIGKILL) }) // the exec's session: the sleep
	exit := rec.waitExit(t, "bg")
	if exit.ExitCode != 0 {
		t.Fatalf("exit = %+v", exit)
	}
	if out, _ := rec.output("bg", "stdout"); string(out) != "done\n" {
		t.Fatalf("stdout = %q", out)
	}
}

func TestReaperReapsOrphansWithoutStealingExecStatuses(t *testing.T) {
	m, rec := newManager(t)
	before := testReaper.Orphans()
	// The exec's child outlives it and is re-parented to us (subreaper), like orphans to PID 1.
	if _, _, perr := m.Start(sh("orphaner", "(sleep 0.2; exit 3) & exit 5")); perr != nil {
		t.Fatal(perr)
	}
	if exit := rec.waitExit(t, "orphaner"); exit.ExitCode != 5 {
		t.Fatalf("exit = %+v", exit)
	}
	deadline := time.Now().Add(10 * time.Second)
	for testReaper.Orphans() == before {
		if time.Now().After(deadline) {
			t.Fatal("orphan was never reaped")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStartRefusesNewIDsWhenFullOrShuttingDown(t *testing.T) {
	rec := newRecorder()
	m := NewManager(testReaper, rec, slog.New(slog.NewTextHandler(testLog, nil)), Options{MaxExecs: 1})
	if _, _, perr := m.Start(sh("one", "exit 0")); perr != nil {
		t.Fatal(perr)
	}
	if _, _, perr := m.Start(sh("two", "exit 0")); perr == nil || perr.Code != proto.CodeTooManyExecs {
		t.Fatalf("got %v", perr)
	}
	rec.waitExit(t, "one")
	m.StopAccepting()
	m2 := NewManager(testReaper, rec, slog.New(slog.NewTextHandler(testLog, nil)), Options{})
	m2.StopAccepting()
	if _, _, perr := m2.Start(sh("three", "exit 0")); perr == nil || perr.Code != proto.CodeShuttingDown {
		t.Fatalf("got %v", perr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !m.WaitAll(ctx) {
		t.Fatal("WaitAll timed out")
	}
}

func TestEnvValuesNeverReachTheLog(t *testing.T) {
	const sentinel = "imp-sentinel-7d1f0c9e"
	m, rec := newManager(t)
	req := sh("secret", "echo $SECRET >/dev/null; exit 0")
	req.Env["SECRET"] = sentinel
	if _, _, perr := m.Start(req); perr != nil {
		t.Fatal(perr)
	}
	rec.waitExit(t, "secret")
	bad := &proto.ExecRequest{ExecID: "secret-bad", Argv: []string{"/nonexistent"}, Env: map[string]string{"SECRET": sentinel}}
	m.Start(bad)
	if strings.Contains(testLog.String(), sentinel) {
		t.Fatal("the env value appeared in the log")
	}
	if !strings.Contains(testLog.String(), "envKeys=2") {
		t.Fatalf("log does not count env keys:\n%s", testLog.String())
	}
}
