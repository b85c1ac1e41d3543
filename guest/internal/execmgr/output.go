package execmgr

import (
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"imp.dev/guest/internal/proto"
)

// pump forwards one pipe as output events of at most proto.MaxOutputChunk bytes, in order.
func (m *Manager) pump(execID, stream string, r *os.File, wg *sync.WaitGroup) {
	defer wg.Done()
	var seq uint64
	buf := make([]byte, proto.MaxOutputChunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			m.pub.Publish(proto.NewOutputEvent(execID, stream, seq, buf[:n]))
			seq++
		}
		if err != nil {
			return
		}
	}
}

// onExit runs once the leader was reaped: wait (bounded) for the output to drain, then publish exit.
func (m *Manager) onExit(execID string, rec *execRecord, ws syscall.WaitStatus, pumps *sync.WaitGroup, outR, errR *os.File) {
	m.mu.Lock()
	rec.reaped = true
	rec.closePidfdLocked()
	m.mu.Unlock()
	drained := make(chan struct{})
	go func() { pumps.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(m.drain):
		m.log.Info("exec output still open after exit; closing it", "execId", execID)
	}
	outR.Close()
	errR.Close()
	<-drained
	code, sig := exitStatus(ws)
	if m.record != nil {
		m.record(execID, code, sig)
	}
	// The state turns exited before the event goes out, so a host that got the exit event and asks
	// exec.status never sees running; done closes only after, so WaitAll (shutdown) waits for it.
	m.mu.Lock()
	rec.state = proto.StateExited
	rec.exitCode = code
	rec.signal = sig
	m.mu.Unlock()
	m.pub.Publish(proto.NewExitEvent(execID, code, sig))
	m.mu.Lock()
	close(rec.done)
	m.mu.Unlock()
	m.log.Info("exec exited", "execId", execID, "exitCode", code, "signal", sig)
	if m.exited != nil {
		m.exited(execID, rec.shutdown)
	}
}

func exitStatus(ws syscall.WaitStatus) (int, string) {
	if ws.Signaled() {
		return 128 + int(ws.Signal()), unix.SignalName(ws.Signal())
	}
	return ws.ExitStatus(), ""
}
