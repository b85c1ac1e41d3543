package server

import (
	"io"
	"sync"
	"time"
)

// sendQueueFrames bounds what a stream may have waiting to be written.
const sendQueueFrames = 64

type outFrame struct {
	data    []byte
	flushed chan struct{} // closed once written (or the stream died); may be nil
}

// conn is one host stream: a reader loop (in Server.serveConn) and this writer with a bounded queue.
type conn struct {
	name      string
	rw        io.ReadWriteCloser
	queue     chan outFrame
	closed    chan struct{}
	closeOnce sync.Once
	stall     time.Duration
}

func newConn(name string, rw io.ReadWriteCloser, stall time.Duration) *conn {
	return &conn{name: name, rw: rw, queue: make(chan outFrame, sendQueueFrames), closed: make(chan struct{}), stall: stall}
}

// close ends the stream once; the writer and reader stop.
func (c *conn) close() {
	c.closeOnce.Do(func() {
		close(c.closed)
		_ = c.rw.Close()
	})
}

// send queues a frame, waiting at most c.stall for room; a stream that stays full is closed so it
// cannot hold up the job or the other streams. Returns false if the frame was not queued.
func (c *conn) send(f outFrame) bool {
	select {
	case c.queue <- f:
		return true
	case <-c.closed:
		return false
	default:
	}
	timer := time.NewTimer(c.stall)
	defer timer.Stop()
	select {
	case c.queue <- f:
		return true
	case <-c.closed:
		return false
	case <-timer.C:
		c.close()
		return false
	}
}

// writeLoop writes queued frames until the stream closes or a write fails.
func (c *conn) writeLoop() {
	defer func() {
		// A panic here must not end PID 1: drop this stream only.
		if recover() != nil {
			c.close()
		}
	}()
	defer func() {
		// Release anyone waiting for a flush on frames that will never be written.
		for {
			select {
			case f := <-c.queue:
				if f.flushed != nil {
					close(f.flushed)
				}
			default:
				return
			}
		}
	}()
	for {
		select {
		case <-c.closed:
			return
		case f := <-c.queue:
			var err error
			if len(f.data) > 0 {
				_, err = c.rw.Write(f.data)
			}
			if f.flushed != nil {
				close(f.flushed)
			}
			if err != nil {
				c.close()
				return
			}
		}
	}
}
