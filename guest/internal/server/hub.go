package server

import (
	"log/slog"
	"sync"
	"time"

	"imp.dev/guest/internal/proto"
)

// Hub fans events out to every connected stream. Publish blocks only while a stream's queue is full,
// at most the stall bound per stream, after which that stream is closed.
type Hub struct {
	mu    sync.Mutex
	conns map[*conn]struct{}
	log   *slog.Logger
}

func newHub(log *slog.Logger) *Hub { return &Hub{conns: map[*conn]struct{}{}, log: log} }

// add registers c unless max streams are already connected.
func (h *Hub) add(c *conn, max int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.conns) >= max {
		return false
	}
	h.conns[c] = struct{}{}
	return true
}

func (h *Hub) remove(c *conn) {
	h.mu.Lock()
	delete(h.conns, c)
	h.mu.Unlock()
}

// Flush waits until everything queued so far on every stream was written, at most timeout per stream.
func (h *Hub) Flush(timeout time.Duration) {
	h.mu.Lock()
	targets := make([]*conn, 0, len(h.conns))
	for c := range h.conns {
		targets = append(targets, c)
	}
	h.mu.Unlock()
	for _, c := range targets {
		flushed := make(chan struct{})
		if !c.send(outFrame{flushed: flushed}) {
			continue
		}
		select {
		case <-flushed:
		case <-time.After(timeout):
		}
	}
}

// Publish encodes event once and queues it on every stream connected now.
func (h *Hub) Publish(event any) {
	frame, err := proto.MarshalFrame(event)
	if err != nil {
		h.log.Error("cannot encode event", "error", err)
		return
	}
	h.mu.Lock()
	targets := make([]*conn, 0, len(h.conns))
	for c := range h.conns {
		targets = append(targets, c)
	}
	h.mu.Unlock()
	for _, c := range targets {
		if !c.send(outFrame{data: frame}) {
			h.log.Debug("event not delivered to closed or stalled stream", "stream", c.name)
		}
	}
}
