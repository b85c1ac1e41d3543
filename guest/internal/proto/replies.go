package proto

import (
	"encoding/base64"
	"encoding/json"
)

// Header is the envelope of every message the guest sends.
type Header struct {
	V    int    `json:"v"`
	Type string `json:"type"`
	ID   uint32 `json:"id"`
}

// ExecState is the state of one exec as reported in exec/exec.status replies.
type ExecState struct {
	ExecID   string `json:"execId"`
	State    string `json:"state"` // running | exited | failed
	PID      int    `json:"pid,omitempty"`
	ExitCode *int   `json:"exitCode,omitempty"`
	Signal   string `json:"signal,omitempty"`
	Error    string `json:"error,omitempty"`
}

// Exec states.
const (
	StateRunning = "running"
	StateExited  = "exited"
	StateFailed  = "failed"
)

type HelloReply struct {
	Header
	Versions     []int    `json:"versions"`
	Agent        string   `json:"agent"`
	Capabilities []string `json:"capabilities"`
}

type ExecReply struct {
	Header
	Started bool `json:"started"`
	ExecState
}

type ExecStatusReply struct {
	Header
	ExecState
}

type ErrorReply struct {
	Header
	Code    string `json:"code"`
	Message string `json:"message"`
}

type OutputEvent struct {
	Header
	ExecID string `json:"execId"`
	Stream string `json:"stream"`
	Seq    uint64 `json:"seq"`
	Data   string `json:"data"`
}

type ExitEvent struct {
	Header
	ExecID   string `json:"execId"`
	ExitCode int    `json:"exitCode"`
	Signal   string `json:"signal,omitempty"`
}

// MaxOutputChunk is the largest raw chunk of one output event.
const MaxOutputChunk = 32 * 1024

// Reply returns the header of a successful reply to req.
func Reply(req *Request) Header { return Header{V: Version, Type: req.Type, ID: req.ID} }

// EmptyReply is the body of replies that carry no fields.
func EmptyReply(req *Request) Header { return Reply(req) }

// NewOutputEvent builds an output event; data must be at most MaxOutputChunk bytes.
func NewOutputEvent(execID, stream string, seq uint64, data []byte) OutputEvent {
	return OutputEvent{
		Header: Header{V: Version, Type: TypeOutput},
		ExecID: execID, Stream: stream, Seq: seq,
		Data: base64.StdEncoding.EncodeToString(data),
	}
}

// NewExitEvent builds an exit event.
func NewExitEvent(execID string, exitCode int, signal string) ExitEvent {
	return ExitEvent{Header: Header{V: Version, Type: TypeExit}, ExecID: execID, ExitCode: exitCode, Signal: signal}
}

// ErrorFrame encodes e as a complete error frame.
func ErrorFrame(e *Error) []byte {
	msg := e.Message
	if len(msg) > 4000 {
		msg = msg[:4000]
	}
	frame, err := MarshalFrame(ErrorReply{Header: Header{V: Version, Type: TypeError, ID: e.ID}, Code: e.Code, Message: msg})
	if err != nil {
		panic("error frame cannot fail to encode: " + err.Error())
	}
	return frame
}

// MarshalFrame encodes v as JSON and frames it.
func MarshalFrame(v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return EncodeFrame(body)
}
