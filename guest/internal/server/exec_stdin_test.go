package server

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"imp.dev/guest/internal/proto"
)

func TestAnExecReadsItsStdinOnceAndNothingElseHoldsIt(t *testing.T) {
	h := start(t, Options{})
	c := h.dial()
	secret := base64.StdEncoding.EncodeToString([]byte("one-time-setup\n"))
	// The process reads the line, then finds the pipe empty and closed; its environment has no trace.
	c.send(`{"v":1,"type":"exec","id":1,"execId":"stdin-1","argv":["/bin/sh","-c","read -r x; echo got:$x; if [ -n \"$(cat)\" ]; then echo more; else echo drained; fi; tr '\\0' '\\n' < /proc/self/environ | grep -c one-time || true"],"env":{"PATH":"/usr/bin:/bin"},"stdin":"` + secret + `"}`)
	c.until("exec", 1)
	var out strings.Builder
	for {
		m := c.recv()
		if m == nil {
			t.Fatal("stream ended")
		}
		if m["type"] == "output" {
			data, _ := base64.StdEncoding.DecodeString(m["data"].(string))
			out.Write(data)
		}
		if m["type"] == "exit" {
			break
		}
	}
	if got := out.String(); got != "got:one-time-setup\ndrained\n0\n" {
		t.Fatalf("output %q", got)
	}
	if strings.Contains(h.logs.String(), "one-time-setup") {
		t.Fatal("stdin reached the log")
	}
	big := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{'x'}, proto.MaxStdinBytes+1))
	c.send(`{"v":1,"type":"exec","id":2,"execId":"stdin-2","argv":["/bin/true"],"env":{},"stdin":"` + big + `"}`)
	if m := c.until("error", 2); m["code"] != proto.CodeBadMessage {
		t.Fatalf("oversized stdin: %v", m)
	}
}
