package proto

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// Version is the only protocol version this agent speaks.
const Version = 1

// Request types (host → guest). A successful reply has the same type.
const (
	TypeHello      = "hello"
	TypeConfigure  = "configure"
	TypeExec       = "exec"
	TypeExecStatus = "exec.status"
	TypeSignal     = "signal"
	TypeShutdown   = "shutdown"
	TypeError      = "error"
	TypeOutput     = "output"
	TypeExit       = "exit"
)

// Request is one decoded, validated host request. Exactly one of the typed fields is set, matching Type.
type Request struct {
	Type       string
	ID         uint32
	Hello      *HelloRequest
	Configure  *ConfigureRequest
	Exec       *ExecRequest
	ExecStatus *ExecStatusRequest
	Signal     *SignalRequest
	Shutdown   *ShutdownRequest
}

type HelloRequest struct {
	Versions []uint32 `json:"versions"`
	Client   string   `json:"client"`
}

type NetworkConfig struct {
	Interface string   `json:"interface"`
	Address   string   `json:"address"`
	Gateway   string   `json:"gateway"`
	DNS       []string `json:"dns"`
	// MAC, when set, replaces the interface's hardware address before anything else: a VM restored
	// from a snapshot wakes with its template's MAC (device state), and the host drops frames from
	// any MAC but the one it leased to this VM.
	MAC string `json:"mac"`
}

type ConfigureRequest struct {
	Hostname    *string        `json:"hostname"`
	Network     *NetworkConfig `json:"network"`
	EntropySeed *string        `json:"entropySeed"`
	// ExitRecordKey authenticates this boot's exit records (docs/guest-protocol.md). Never log it.
	ExitRecordKey *string `json:"exitRecordKey"`
	// UnixTimeMs sets the wall clock: a VM restored from a memory snapshot wakes with the time the
	// template was saved at.
	UnixTimeMs *int64 `json:"unixTimeMs"`
	// Seed is EntropySeed decoded; filled by validation. Never log it.
	Seed []byte `json:"-"`
	// RecordKey is ExitRecordKey decoded (32 bytes); filled by validation.
	RecordKey []byte `json:"-"`
}

// ExecRequest starts a workload. Env is secret: never log or persist it.
type ExecRequest struct {
	ExecID string            `json:"execId"`
	Argv   []string          `json:"argv"`
	Env    map[string]string `json:"env"`
	Cwd    *string           `json:"cwd"`
	UID    *uint32           `json:"uid"`
	GID    *uint32           `json:"gid"`
	// ShutdownAfterExit ("poweroff" | "reboot") makes the guest shut down once this exec has exited
	// and its exit event was written to the connected streams.
	ShutdownAfterExit *string `json:"shutdownAfterExit"`
	// Stdin (base64) is written to the process's stdin, which is then closed: a secret handed over
	// this way is read once and stays in no environment. Secret: never log it.
	Stdin *string `json:"stdin"`
	// StdinBytes is Stdin decoded; filled by validation.
	StdinBytes []byte `json:"-"`
}

type ExecStatusRequest struct {
	ExecID string `json:"execId"`
}

type SignalRequest struct {
	ExecID string `json:"execId"`
	Signal string `json:"signal"`
}

type ShutdownRequest struct {
	Mode string `json:"mode"`
}

type envelope struct {
	V    json.RawMessage `json:"v"`
	Type json.RawMessage `json:"type"`
	ID   json.RawMessage `json:"id"`
}

// DecodeRequest parses and validates one frame body. On failure it returns an *Error whose ID is
// the request id when it could be read. It never panics on any input (fuzzed).
func DecodeRequest(body []byte) (*Request, *Error) {
	if !utf8.Valid(body) || !json.Valid(body) {
		return nil, Errorf(0, CodeBadJSON, "frame body is not valid UTF-8 JSON")
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, Errorf(0, CodeBadMessage, "frame body is not a JSON object")
	}
	if err := checkKeys(body); err != nil {
		return nil, Errorf(0, CodeBadMessage, "%s", err.Error())
	}
	var env envelope
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, Errorf(0, CodeBadMessage, "cannot read envelope")
	}
	var id uint32
	if env.ID == nil || json.Unmarshal(env.ID, &id) != nil {
		return nil, Errorf(0, CodeBadMessage, "id must be an integer 1..4294967295")
	}
	if id == 0 {
		return nil, Errorf(0, CodeBadMessage, "id must be non-zero in a request")
	}
	var version int64
	if env.V == nil || json.Unmarshal(env.V, &version) != nil {
		return nil, Errorf(id, CodeBadMessage, "v must be an integer")
	}
	if version != Version {
		return nil, Errorf(id, CodeUnsupportedVersion, "protocol version %d is not supported; this agent speaks %d", version, Version)
	}
	var typ string
	if env.Type == nil || json.Unmarshal(env.Type, &typ) != nil {
		return nil, Errorf(id, CodeBadMessage, "type must be a string")
	}
	req := &Request{Type: typ, ID: id}
	var target any
	switch typ {
	case TypeHello:
		req.Hello = &HelloRequest{}
		target = req.Hello
	case TypeConfigure:
		req.Configure = &ConfigureRequest{}
		target = req.Configure
	case TypeExec:
		req.Exec = &ExecRequest{}
		target = req.Exec
	case TypeExecStatus:
		req.ExecStatus = &ExecStatusRequest{}
		target = req.ExecStatus
	case TypeSignal:
		req.Signal = &SignalRequest{}
		target = req.Signal
	case TypeShutdown:
		req.Shutdown = &ShutdownRequest{}
		target = req.Shutdown
	default:
		return nil, Errorf(id, CodeUnknownType, "unknown request type %q", truncate(typ, 64))
	}
	if err := json.Unmarshal(body, target); err != nil {
		return nil, Errorf(id, CodeBadMessage, "%s", describeJSONError(err))
	}
	if err := validate(req); err != nil {
		return nil, Errorf(id, CodeBadMessage, "%s", err.Error())
	}
	return req, nil
}

// describeJSONError names the field and expected type without echoing the value (it may be secret).
func describeJSONError(err error) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		field := typeErr.Field
		if field == "" {
			field = "(message)"
		}
		return "field " + truncate(field, 64) + " must be " + typeErr.Type.String() + ", got JSON " + typeErr.Value
	}
	return "cannot decode fields"
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
