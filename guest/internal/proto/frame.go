// Package proto is the guest side of the guest protocol, version 1 (docs/guest-protocol.md):
// length-prefixed JSON frames, request decoding with full validation, reply and event encoding.
// Everything here is pure: no I/O beyond the io.Reader/io.Writer it is given.
package proto

import (
	"encoding/binary"
	"fmt"
	"io"
)

// MaxFrameBytes is the hard limit of a frame body. A larger declared length ends the stream.
const MaxFrameBytes = 1 << 20

const headerBytes = 4

// FrameTooLargeError reports a declared frame length above MaxFrameBytes. The stream cannot be
// resynchronised after it: send an error frame and close.
type FrameTooLargeError struct{ Length uint32 }

func (e *FrameTooLargeError) Error() string {
	return fmt.Sprintf("cannot read frame: declared length %d exceeds the limit of %d bytes", e.Length, MaxFrameBytes)
}

// ReadFrame reads one frame body. It never allocates more than MaxFrameBytes. It returns io.EOF
// only at a clean frame boundary, io.ErrUnexpectedEOF for a truncated frame, and
// *FrameTooLargeError for an oversize declared length (nothing of the body is read then).
func ReadFrame(r io.Reader) ([]byte, error) {
	var header [headerBytes]byte
	if _, err := io.ReadFull(r, header[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(header[:])
	if n > MaxFrameBytes {
		return nil, &FrameTooLargeError{Length: n}
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return body, nil
}

// EncodeFrame prefixes body with its length. It fails if body exceeds MaxFrameBytes.
func EncodeFrame(body []byte) ([]byte, error) {
	if len(body) > MaxFrameBytes {
		return nil, fmt.Errorf("cannot encode frame: body is %d bytes, limit %d", len(body), MaxFrameBytes)
	}
	frame := make([]byte, headerBytes+len(body))
	binary.BigEndian.PutUint32(frame, uint32(len(body)))
	copy(frame[headerBytes:], body)
	return frame, nil
}
