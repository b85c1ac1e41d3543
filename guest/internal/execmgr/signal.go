package execmgr

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
	"imp.dev/guest/internal/proto"
)

// ErrUnknownExec is returned by Signal for an id never seen.
var ErrUnknownExec = errors.New("unknown exec id")

// ErrExecExited is returned by Signal when the exec's leader has already exited and been reaped
// (or never started): nothing was signalled. The protocol answers it as a successful no-op.
var ErrExecExited = errors.New("exec already exited")

// errNoPidfd means the kernel gave no pidfd at fork (Linux < 5.2): the exec cannot be signalled
// safely, so it is not signalled at all.
var errNoPidfd = errors.New("no pidfd for the exec (needs Linux 5.2 or later)")

// Signal sends sig to the exec's process group. Returns ErrUnknownExec for an unknown id and
// ErrExecExited if the exec's leader is no longer there; sig never reaches any other process.
func (m *Manager) Signal(execID string, sig syscall.Signal) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.execs[execID]
	if !ok {
		return ErrUnknownExec
	}
	return m.signalLocked(rec, sig)
}

// SignalAll sends sig to every running exec (SIGTERM/SIGINT forwarding).
func (m *Manager) SignalAll(sig syscall.Signal) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, rec := range m.execs {
		if err := m.signalLocked(rec, sig); err != nil && !errors.Is(err, ErrExecExited) {
			m.log.Warn("cannot signal exec", "execId", id, "signal", unix.SignalName(sig), "error", err)
		}
	}
}

// signalLocked delivers sig to the process group of rec's leader; m.mu is held, which keeps
// rec.pidfd open (onExit closes it under m.mu) so its number cannot be reused under us.
//
// The group id is the leader's pid (setsid), and kill(2) on a pid is only unsafe once the leader
// has been reaped, because then the number can be reused. Reaping happens only in the Reaper, so
// the check and the kill run inside Reaper.whileUnreaped: between the reaper's wait4 and onExit
// marking the record (the window where the pid could be reused) the leader is no longer
// registered and nothing is sent. Inside, the pidfd asks the kernel whether the very process we
// forked still exists (signal 0; ESRCH once reaped), so even a reap by someone else than the
// Reaper could not make us signal a stranger. pidfd_send_signal itself is not used for delivery: it
// reaches only the leader, not its group (PIDFD_SIGNAL_PROCESS_GROUP needs Linux 6.9).
func (m *Manager) signalLocked(rec *execRecord, sig syscall.Signal) error {
	if rec.state != proto.StateRunning || rec.reaped {
		return ErrExecExited
	}
	return signalGroup(m.reaper, rec.pid, rec.pidfd, sig)
}

// signalGroup sends sig to the process group led by the registered child pid, whose pidfd is
// pidfd, unless that child was already reaped (ErrExecExited).
func signalGroup(r *Reaper, pid, pidfd int, sig syscall.Signal) error {
	if pid <= 0 {
		return ErrExecExited
	}
	if pidfd < 0 {
		return errNoPidfd
	}
	var err error
	ran := r.whileUnreaped(pid, func() {
		if err = unix.PidfdSendSignal(pidfd, 0, nil, 0); err == nil {
			err = unix.Kill(-pid, sig)
		}
	})
	if !ran || errors.Is(err, unix.ESRCH) {
		return ErrExecExited
	}
	return err
}

// closePidfdLocked closes the leader's pidfd once (called when it is reaped); m.mu held.
func (r *execRecord) closePidfdLocked() {
	if r.pidfd >= 0 {
		_ = unix.Close(r.pidfd)
		r.pidfd = -1
	}
}
