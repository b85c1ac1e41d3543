package execmgr

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"imp.dev/guest/internal/proto"
)

// registered reports whether pid is a child the reaper has not reaped yet.
func (r *Reaper) registered(pid int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.waiters[pid]
	return ok
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil && pid > 0 {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid in %s", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// openPidfd pins a process that is known to be alive (so pid still names it).
func openPidfd(t *testing.T, pid int) int {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		t.Fatalf("pidfd_open(%d): %v", pid, err)
	}
	return fd
}

// waitGone waits until the process behind pidfd has exited (and was reaped as an orphan).
func waitGone(t *testing.T, pidfd int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for unix.PidfdSendSignal(pidfd, 0, nil, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatal("process is still alive")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func countFds(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// The reported race: the reaper has collected the leader (its pid may now be reused) but onExit
// has not marked the record yet. Holding the manager lock freezes exactly that window. A signal
// sent then must reach nobody: the old code sent kill(-pid), which here would still have killed
// the leader's background child, and with the group gone, whatever process took the pid next.
func TestSignalBetweenReapAndExitMarkReachesNobody(t *testing.T) {
	m, rec := newManager(t)
	dir := t.TempDir()
	pidFile, goFile := filepath.Join(dir, "bg.pid"), filepath.Join(dir, "go")
	st, _, perr := m.Start(sh("window", "sleep 30 >/dev/null 2>&1 & echo $! >"+pidFile+"; until [ -e "+goFile+" ]; do sleep 0.01; done"))
	if perr != nil {
		t.Fatal(perr)
	}
	m.mu.Lock() // taken before the leader may exit, so onExit cannot mark the record
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		m.mu.Unlock()
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for testReaper.registered(st.PID) {
		if time.Now().After(deadline) {
			m.mu.Unlock()
			t.Fatal("leader never reaped")
		}
		time.Sleep(5 * time.Millisecond)
	}
	r := m.execs["window"]
	inWindow := r.state == proto.StateRunning && !r.reaped && r.pidfd >= 0
	err := m.signalLocked(r, syscall.SIGKILL)
	m.mu.Unlock()
	if !inWindow {
		t.Fatalf("not in the reap window: state %s, reaped %v, pidfd %d", r.state, r.reaped, r.pidfd)
	}
	if !errors.Is(err, ErrExecExited) {
		t.Fatalf("signal in the window: %v, want ErrExecExited", err)
	}
	bg := openPidfd(t, readPid(t, pidFile)) // fails if the group kill was sent: the child is dead
	defer unix.Close(bg)
	if err := unix.PidfdSendSignal(bg, 0, nil, 0); err != nil {
		t.Fatalf("background child was hit: %v", err)
	}
	_ = unix.PidfdSendSignal(bg, syscall.SIGKILL, nil, 0)
	rec.waitExit(t, "window")
	if err := m.Signal("window", syscall.SIGKILL); err != ErrExecExited {
		t.Fatalf("signal after exit: %v", err)
	}
}

// Should anything but the Reaper ever reap a registered child, the pidfd (not the bookkeeping)
// decides: the kernel says ESRCH and nothing is sent to the pid, which may already be reused.
func TestSignalGroupBelievesThePidfdOverTheRegistry(t *testing.T) {
	pidfd := -1
	testReaper.mu.Lock()
	pid, _, err := syscall.StartProcess("/bin/true", []string{"true"}, &syscall.ProcAttr{Sys: &syscall.SysProcAttr{Setsid: true, PidFD: &pidfd}})
	if err == nil {
		var ws syscall.WaitStatus
		_, err = syscall.Wait4(pid, &ws, 0, nil) // reaped behind the Reaper's back
		testReaper.waiters[pid] = func(syscall.WaitStatus) {}
	}
	testReaper.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		testReaper.mu.Lock()
		delete(testReaper.waiters, pid)
		testReaper.mu.Unlock()
		unix.Close(pidfd)
	}()
	if err := signalGroup(testReaper, pid, pidfd, syscall.SIGKILL); !errors.Is(err, ErrExecExited) {
		t.Fatalf("got %v, want ErrExecExited", err)
	}
}

func TestEachExecHoldsAPidfdToItsLeaderUntilReaped(t *testing.T) {
	m, rec := newManager(t)
	st, _, perr := m.Start(sh("pidfd", "sleep 30"))
	if perr != nil {
		t.Fatal(perr)
	}
	m.mu.Lock()
	fd := m.execs["pidfd"].pidfd
	m.mu.Unlock()
	info, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
	if err != nil || !strings.Contains(string(info), fmt.Sprintf("Pid:\t%d\n", st.PID)) {
		t.Fatalf("fd %d is not a pidfd of %d: %q %v", fd, st.PID, info, err)
	}
	if err := m.Signal("pidfd", syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	rec.waitExit(t, "pidfd")
	m.mu.Lock()
	fd = m.execs["pidfd"].pidfd
	m.mu.Unlock()
	if fd != -1 {
		t.Fatalf("pidfd still open after exit: %d", fd)
	}
}

func TestExecsDoNotInheritPidfds(t *testing.T) {
	m, rec := newManager(t)
	if _, _, perr := m.Start(sh("holder", "sleep 30")); perr != nil { // its pidfd is open meanwhile
		t.Fatal(perr)
	}
	if _, _, perr := m.Start(sh("fds", "for f in /proc/self/fd/*; do readlink $f; done; true")); perr != nil {
		t.Fatal(perr)
	}
	if exit := rec.waitExit(t, "fds"); exit.ExitCode != 0 {
		t.Fatalf("exit = %+v", exit)
	}
	out, _ := rec.output("fds", "stdout")
	if lines := strings.Split(string(out), "\n"); len(lines) < 3 || lines[0] != "/dev/null" || strings.Contains(string(out), "pidfd") {
		t.Fatalf("fds of the exec:\n%s", out)
	}
	if err := m.Signal("holder", syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	rec.waitExit(t, "holder")
}

// Many execs, signalled while they run and exit, leave no file descriptor behind (pidfds, pipes),
// and every signal result is either delivered or ErrExecExited.
func TestManyExecsLeaveNoFdsAndSignalsRaceExitsSafely(t *testing.T) {
	warm, rec := newManager(t)
	if _, _, perr := warm.Start(sh("warm", "exit 0")); perr != nil {
		t.Fatal(perr)
	}
	rec.waitExit(t, "warm")
	before := countFds(t)

	const execs = 200
	m, _ := newManager(t)
	var wg sync.WaitGroup
	errs := make(chan error, execs)
	for i := range execs {
		id := fmt.Sprintf("many-%d", i)
		script := "exit 0"
		if i%2 == 1 {
			script = "sleep 0.05"
		}
		if _, _, perr := m.Start(sh(id, script)); perr != nil {
			t.Fatal(perr)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				err := m.Signal(id, syscall.SIGCONT)
				if errors.Is(err, ErrExecExited) {
					return
				}
				if err != nil {
					errs <- fmt.Errorf("%s: %w", id, err)
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
		if i%50 == 0 {
			m.SignalAll(syscall.SIGCONT)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !m.WaitAll(ctx) {
		t.Fatal("WaitAll timed out")
	}
	if after := countFds(t); after != before {
		t.Fatalf("open fds: %d before, %d after %d execs", before, after, execs)
	}
}
