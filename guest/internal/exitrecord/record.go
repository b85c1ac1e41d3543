// Package exitrecord writes the workload's exit as a record the host can trust after the fact: a
// console line authenticated with a per-boot key that the host gives the guest agent in `configure`
// and that the workload never sees (docs/guest-protocol.md, "Exit records"). A restarted node agent
// that finds the VM already gone reads the first valid record for the exec id from the console
// file; a line the job wrote itself (it owns the console) does not verify.
package exitrecord

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Prefix starts every record line; the version is part of what the MAC covers.
const Prefix = "imp-exit-record/1"

// KeyBytes is the length of the per-boot key.
const KeyBytes = 32

// Payload is what a record states. Field order is fixed by the struct, but the host verifies the
// MAC over the payload bytes as written and never re-encodes them.
type Payload struct {
	ExecID   string `json:"execId"`
	ExitCode int    `json:"exitCode"`
	Signal   string `json:"signal,omitempty"`
}

var b64 = base64.RawURLEncoding

// Line formats one record: "imp-exit-record/1 <payload> <mac>", no newline.
func Line(key []byte, p Payload) (string, error) {
	if len(key) != KeyBytes {
		return "", errors.New("exit record key must be 32 bytes")
	}
	body, err := json.Marshal(p)
	if err != nil {
		return "", err
	}
	payload := b64.EncodeToString(body)
	return Prefix + " " + payload + " " + b64.EncodeToString(mac(key, payload)), nil
}

// Verify parses a record line and checks its MAC; it returns the payload only when the line is a
// well-formed record authenticated with key.
func Verify(key []byte, line string) (Payload, bool) {
	fields := strings.Fields(line)
	if len(fields) != 3 || fields[0] != Prefix || len(key) != KeyBytes {
		return Payload{}, false
	}
	got, err := b64.DecodeString(fields[2])
	if err != nil || !hmac.Equal(got, mac(key, fields[1])) {
		return Payload{}, false
	}
	body, err := b64.DecodeString(fields[1])
	if err != nil {
		return Payload{}, false
	}
	var p Payload
	if json.Unmarshal(body, &p) != nil || p.ExecID == "" {
		return Payload{}, false
	}
	return p, true
}

func mac(key []byte, payload string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(Prefix + " " + payload))
	return h.Sum(nil)
}

// Writer keeps the per-boot key and writes records to the console. The key is set once per boot:
// a second, different key is refused, so whoever configured the guest first (the host, before any
// workload ran) is the only one whose records count.
type Writer struct {
	mu  sync.Mutex
	out io.Writer
	key []byte
}

// NewWriter writes records to out (the console in a VM, stderr in process mode).
func NewWriter(out io.Writer) *Writer { return &Writer{out: out} }

// ErrKeySet is returned when a different key arrives after one was set.
var ErrKeySet = errors.New("the exit record key is set once per boot; a different key is refused")

// SetKey stores the key (a copy). Setting the same key again is a no-op.
func (w *Writer) SetKey(key []byte) error {
	if len(key) != KeyBytes {
		return errors.New("exit record key must be 32 bytes")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.key != nil {
		if hmac.Equal(w.key, key) {
			return nil
		}
		return ErrKeySet
	}
	w.key = lockedCopy(key)
	return nil
}

// lockedCopy keeps the key in a page of its own that is locked in memory and left out of core
// dumps: a job that can add swap (root in the guest) must not find it in a swap file. Where the
// page cannot be had (no CAP_IPC_LOCK in a test process), an ordinary copy serves.
func lockedCopy(key []byte) []byte {
	page, err := unix.Mmap(-1, 0, unix.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return append([]byte(nil), key...)
	}
	if unix.Mlock(page) != nil {
		_ = unix.Munmap(page)
		return append([]byte(nil), key...)
	}
	_ = unix.Madvise(page, unix.MADV_DONTDUMP)
	return page[:copy(page, key):len(key)]
}

// Enabled reports whether a key was set (only then are records written).
func (w *Writer) Enabled() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.key != nil
}

// Write writes the record for an exec's exit, twice: a console line can be torn by kernel output
// written at the same moment, and the host takes the first copy that verifies. Without a key it
// writes nothing (the host then knows no trustworthy outcome).
func (w *Writer) Write(p Payload) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.key == nil {
		return nil
	}
	line, err := Line(w.key, p)
	if err != nil {
		return err
	}
	_, err = io.WriteString(w.out, "\n"+line+"\n"+line+"\n")
	return err
}
