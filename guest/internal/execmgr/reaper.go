package execmgr

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// Reaper is the only code in the process that calls wait4. It reaps every child (orphans
// re-parented to PID 1 included) and hands the status of registered children to their owner.
//
// The classic PID-1 pitfall is a reaper that steals the exit status of a child another goroutine
// is waiting for. Here nobody else waits: exec processes are registered with Start, which holds the
// reaper's lock from fork until the pid is registered, so a child that exits at once cannot be
// reaped before its owner is known.
type Reaper struct {
	mu      sync.Mutex
	waiters map[int]func(syscall.WaitStatus)
	log     *slog.Logger
	orphans uint64
}

// NewReaper makes a reaper; call Run to start reaping.
func NewReaper(log *slog.Logger) *Reaper {
	return &Reaper{waiters: map[int]func(syscall.WaitStatus){}, log: log}
}

// Start runs start (which must fork exactly one child and return its pid) with reaping paused,
// then registers onExit for that pid. onExit runs on its own goroutine, once.
func (r *Reaper) Start(start func() (int, error), onExit func(syscall.WaitStatus)) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := start()
	if err != nil {
		return 0, err
	}
	r.waiters[pid] = onExit
	return pid, nil
}

// whileUnreaped runs fn with reaping paused if pid is a child registered with Start and not yet
// reaped, and reports whether it ran. While fn runs, that child (live or zombie) still holds its
// pid, so the number, and the process group id it leads, cannot be handed to another process.
// fn must be short and must not call back into the Reaper.
func (r *Reaper) whileUnreaped(pid int, fn func()) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.waiters[pid]; !ok {
		return false
	}
	fn()
	return true
}

// Run reaps on every SIGCHLD (and every second, since signals coalesce and may be missed) until
// ctx ends. Blocks.
func (r *Reaper) Run(ctx context.Context) {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD)
	defer signal.Stop(sigs)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		r.ReapOnce()
		select {
		case <-ctx.Done():
			return
		case <-sigs:
		case <-tick.C:
		}
	}
}

// ReapOnce reaps every child that has exited so far, without blocking.
func (r *Reaper) ReapOnce() {
	type exited struct {
		fn func(syscall.WaitStatus)
		ws syscall.WaitStatus
	}
	var done []exited
	r.mu.Lock()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			break
		}
		if fn, ok := r.waiters[pid]; ok {
			delete(r.waiters, pid)
			done = append(done, exited{fn, ws})
		} else {
			r.orphans++
			r.log.Debug("reaped orphan", "pid", pid, "status", int(ws))
		}
	}
	r.mu.Unlock()
	for _, d := range done {
		go d.fn(d.ws)
	}
}

// Orphans is how many unregistered children have been reaped.
func (r *Reaper) Orphans() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.orphans
}
