package supervise

import (
	"os"
	"sync"
	"time"
)

// FileBound caps a file the process writes on the node's disk (a VM's serial console log): the
// agent enforces the same cap while it watches, but the process outlives the agent (an upgrade, a
// crash), and a guest printing without end must not fill the node meanwhile. Polled, not watched
// with inotify: one stat per interval is cheap, and the overshoot is bounded by the write rate
// times the interval (a guest's console under emulation writes a few hundred KiB/s).
type FileBound struct {
	Path     string
	MaxBytes int64
	// Interval between checks; default 250 ms.
	Interval time.Duration
}

// boundWatch SIGKILLs the process once the file passes its bound and remembers by how much, for
// the exit record. Stopped when the process has exited.
type boundWatch struct {
	mu       sync.Mutex
	exceeded *int64
	stop     chan struct{}
	stopped  sync.Once
}

func watchBound(b FileBound, kill func(), logf func(string, ...any)) *boundWatch {
	w := &boundWatch{stop: make(chan struct{})}
	interval := b.Interval
	if interval <= 0 {
		interval = 250 * time.Millisecond
	}
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
			info, err := os.Stat(b.Path)
			if err != nil || info.Size() <= b.MaxBytes {
				continue
			}
			size := info.Size()
			w.mu.Lock()
			w.exceeded = &size
			w.mu.Unlock()
			logf("%s is %d bytes, over its bound of %d: killing the process", b.Path, size, b.MaxBytes)
			kill()
			return
		}
	}()
	return w
}

// finish stops the watch and returns the file's size when the bound was what ended the process.
func (w *boundWatch) finish() *int64 {
	w.stopped.Do(func() { close(w.stop) })
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.exceeded
}
