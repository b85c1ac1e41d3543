package proto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

func TestReadFrameReturnsBodiesInOrder(t *testing.T) {
	var buf bytes.Buffer
	for _, body := range []string{`{"a":1}`, ``, `{"b":2}`} {
		f, err := EncodeFrame([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(f)
	}
	for _, want := range []string{`{"a":1}`, ``, `{"b":2}`} {
		got, err := ReadFrame(&buf)
		if err != nil || string(got) != want {
			t.Fatalf("ReadFrame = %q, %v; want %q", got, err, want)
		}
	}
	if _, err := ReadFrame(&buf); err != io.EOF {
		t.Fatalf("at end: %v, want io.EOF", err)
	}
}

func TestReadFrameRejectsOversizeWithoutReadingTheBody(t *testing.T) {
	var header [4]byte
	binary.BigEndian.PutUint32(header[:], MaxFrameBytes+1)
	r := bytes.NewReader(append(header[:], 'x'))
	_, err := ReadFrame(r)
	var tooLarge *FrameTooLargeError
	if !errors.As(err, &tooLarge) || tooLarge.Length != MaxFrameBytes+1 {
		t.Fatalf("err = %v, want FrameTooLargeError", err)
	}
	if r.Len() != 1 {
		t.Fatalf("read %d body bytes of an oversize frame", 1-r.Len())
	}
}

func TestReadFrameAcceptsExactlyTheMaximum(t *testing.T) {
	body := bytes.Repeat([]byte{' '}, MaxFrameBytes)
	f, err := EncodeFrame(body)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadFrame(bytes.NewReader(f))
	if err != nil || len(got) != MaxFrameBytes {
		t.Fatalf("len %d, %v", len(got), err)
	}
	if _, err := EncodeFrame(append(body, ' ')); err == nil {
		t.Fatal("EncodeFrame accepted an oversize body")
	}
}

func TestReadFrameReportsTruncation(t *testing.T) {
	for _, in := range [][]byte{{0, 0}, {0, 0, 0, 5, '{'}} {
		if _, err := ReadFrame(bytes.NewReader(in)); err != io.ErrUnexpectedEOF {
			t.Fatalf("ReadFrame(%v) = %v, want ErrUnexpectedEOF", in, err)
		}
	}
}
