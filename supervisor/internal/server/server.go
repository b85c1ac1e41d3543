package server

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Handler is what the server asks of the supervisor.
type Handler interface {
	Status() Status
	// Signal delivers a named signal to the process; an error for names outside the allowed set.
	Signal(name string) error
}

// writeTimeout bounds every write, so a client that stops reading cannot stall the supervisor.
const writeTimeout = 2 * time.Second

type conn struct {
	c  net.Conn
	mu sync.Mutex
	// answering is held while a request is answered and its reply written. Shutdown takes it
	// before the exit event, so the reply to a signal that ends the process comes before the exit
	// event that closes the connection, instead of being lost to the close (seen on a loaded
	// machine). Both halves are bounded: answers are quick and writes have a deadline.
	answering sync.Mutex
}

func (k *conn) send(m Message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	_ = k.c.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err = k.c.Write(append(b, '\n'))
	return err
}

// Server serves one listener until Shutdown.
type Server struct {
	ln      net.Listener
	handler Handler
	mu      sync.Mutex
	conns   map[*conn]struct{}
	final   *Status // set by Shutdown; new connections get it and are closed
	wg      sync.WaitGroup
}

func New(ln net.Listener, h Handler) *Server {
	return &Server{ln: ln, handler: h, conns: map[*conn]struct{}{}}
}

// Serve accepts connections until the listener is closed.
func (s *Server) Serve() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // e.g. EMFILE: back off instead of spinning
			continue
		}
		k := &conn{c: c}
		s.mu.Lock()
		final, full := s.final, len(s.conns) >= MaxConns
		if final == nil && !full {
			s.conns[k] = struct{}{}
			s.wg.Add(1)
		}
		s.mu.Unlock()
		switch {
		case final != nil:
			_ = k.send(Message{Type: "exit", Status: final})
			_ = c.Close()
		case full:
			_ = k.send(Message{Type: "reply", OK: ptr(false), Error: "too many connections"})
			_ = c.Close()
		default:
			go s.handle(k)
		}
	}
}

func (s *Server) handle(k *conn) {
	defer s.wg.Done()
	defer s.drop(k)
	st := s.handler.Status()
	if err := k.send(Message{Type: "hello", Status: &st}); err != nil {
		return
	}
	r := bufio.NewReaderSize(k.c, MaxLine)
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			_ = k.send(Message{Type: "reply", OK: ptr(false), Error: "line longer than 4096 bytes"})
			return
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			return
		}
		k.answering.Lock()
		reply, ok := s.answer(line)
		var sendErr error
		if ok {
			sendErr = k.send(reply)
		}
		k.answering.Unlock()
		if sendErr != nil {
			return
		}
	}
}

// answer turns one request line into its reply; ok is false for a line that is not worth one.
func (s *Server) answer(line []byte) (Message, bool) {
	var req Request
	if err := json.Unmarshal(line, &req); err != nil {
		return Message{Type: "reply", OK: ptr(false), Error: "request is not a JSON object"}, true
	}
	switch req.Op {
	case "status":
		st := s.handler.Status()
		return Message{Type: "reply", ID: req.ID, OK: ptr(true), Status: &st}, true
	case "signal":
		if err := s.handler.Signal(req.Signal); err != nil {
			return Message{Type: "reply", ID: req.ID, OK: ptr(false), Error: err.Error()}, true
		}
		return Message{Type: "reply", ID: req.ID, OK: ptr(true)}, true
	default:
		return Message{Type: "reply", ID: req.ID, OK: ptr(false), Error: "unknown op"}, true
	}
}

func (s *Server) drop(k *conn) {
	_ = k.c.Close()
	s.mu.Lock()
	delete(s.conns, k)
	s.mu.Unlock()
}

// Shutdown sends the final status (the exit event) to every connection, closes them and the
// listener, and waits for the handlers to finish. Connections accepted afterwards, until the
// listener is closed, get the same event.
func (s *Server) Shutdown(final Status) {
	s.mu.Lock()
	s.final = &final
	conns := make([]*conn, 0, len(s.conns))
	for k := range s.conns {
		conns = append(conns, k)
	}
	s.mu.Unlock()
	for _, k := range conns {
		k.answering.Lock()
		_ = k.send(Message{Type: "exit", Status: &final})
		_ = k.c.Close()
		k.answering.Unlock()
	}
	_ = s.ln.Close()
	s.wg.Wait()
}

func ptr[T any](v T) *T { return &v }
