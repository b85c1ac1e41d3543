package proto

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

// FuzzDecode feeds arbitrary bytes through the frame reader and the request decoder, as a host
// stream would. Invariants: no panic; bodies never exceed the limit; every failure is a known
// error; an accepted request survives a re-encode/decode round trip unchanged in type and id.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"v":1,"type":"hello","id":1,"versions":[1],"client":"imp-agent/0.1.0"}`,
		`{"v":1,"type":"exec","id":3,"execId":"x","argv":["/bin/sh","-c","true"],"env":{"K":"V"},"cwd":"/","uid":0,"gid":0}`,
		`{"v":1,"type":"configure","id":2,"hostname":"h","network":{"interface":"eth0","address":"10.0.0.2/30","gateway":"10.0.0.1","dns":["10.0.0.1"]},"entropySeed":"AAECAwQFBgcICQoLDA0ODw=="}`,
	} {
		frame, _ := EncodeFrame([]byte(seed))
		f.Add(frame)
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for i := 0; i < 64; i++ {
			body, err := ReadFrame(r)
			if err != nil {
				var tooLarge *FrameTooLargeError
				if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.As(err, &tooLarge) {
					t.Fatalf("unexpected error kind %T: %v", err, err)
				}
				return
			}
			if len(body) > MaxFrameBytes {
				t.Fatalf("body of %d bytes", len(body))
			}
			req, perr := DecodeRequest(body)
			if perr != nil {
				if perr.Code == "" || perr.Message == "" {
					t.Fatalf("empty error %+v", perr)
				}
				if len(ErrorFrame(perr)) > MaxFrameBytes+4 {
					t.Fatal("error frame too large")
				}
				continue
			}
			if req.ID == 0 {
				t.Fatal("accepted id 0")
			}
			again, perr := DecodeRequest(reencode(t, body))
			if perr != nil || again.Type != req.Type || again.ID != req.ID {
				t.Fatalf("round trip changed the request: %v", perr)
			}
		}
	})
}

// reencode parses body generically and marshals it again (canonical key order, escapes).
func reencode(t *testing.T, body []byte) []byte {
	var v map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("accepted body does not re-parse: %v", err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
