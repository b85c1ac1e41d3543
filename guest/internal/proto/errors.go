package proto

import "fmt"

// Error codes sent in error frames (docs/guest-protocol.md, "Errors").
const (
	CodeFrameTooLarge      = "frame_too_large"
	CodeBadJSON            = "bad_json"
	CodeBadMessage         = "bad_message"
	CodeUnsupportedVersion = "unsupported_version"
	CodeUnknownType        = "unknown_type"
	CodeNotFound           = "not_found"
	CodeTooManyExecs       = "too_many_execs"
	CodeShuttingDown       = "shutting_down"
	CodeConfigureFailed    = "configure_failed"
	CodeTooManyStreams     = "too_many_streams"
	CodeInternal           = "internal"
)

// Error is a protocol-level failure that becomes an error frame. ID is the request id it answers,
// or 0 when the request could not be read far enough to know it. Message must never carry request
// values that may be secret (env); it names fields, not their contents.
type Error struct {
	ID      uint32
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf builds an *Error.
func Errorf(id uint32, code, format string, args ...any) *Error {
	return &Error{ID: id, Code: code, Message: fmt.Sprintf(format, args...)}
}
