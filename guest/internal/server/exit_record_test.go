package server

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"imp.dev/guest/internal/exitrecord"
	"imp.dev/guest/internal/proto"
)

func TestAnExitIsRecordedWithTheConfiguredKeyBeforeItsEvent(t *testing.T) {
	console := &syncBuffer{}
	h := start(t, Options{Records: exitrecord.NewWriter(console)})
	c := h.dial()
	key := bytes.Repeat([]byte{7}, exitrecord.KeyBytes)
	c.send(`{"v":1,"type":"configure","id":1,"exitRecordKey":"` + base64.StdEncoding.EncodeToString(key) + `"}`)
	c.until("configure", 1)
	c.send(`{"v":1,"type":"exec","id":2,"execId":"rec-1","argv":["/bin/sh","-c","exit 3"],"env":{}}`)
	c.until("exec", 2)
	if m := c.until("exit", 0); m["exitCode"] != float64(3) {
		t.Fatalf("exit: %v", m)
	}
	// The record was written before the exit event went out.
	var verified int
	for _, line := range strings.Split(console.String(), "\n") {
		if p, ok := exitrecord.Verify(key, line); ok {
			if p.ExecID != "rec-1" || p.ExitCode != 3 || p.Signal != "" {
				t.Fatalf("record says %+v", p)
			}
			verified++
		}
	}
	if verified == 0 {
		t.Fatalf("no verifiable exit record on the console: %q", console.String())
	}
	if strings.Contains(h.logs.String(), base64.StdEncoding.EncodeToString(key)) {
		t.Fatal("the exit record key reached the log")
	}
}

func TestASecondDifferentExitRecordKeyIsRefused(t *testing.T) {
	h := start(t, Options{Records: exitrecord.NewWriter(&syncBuffer{})})
	c := h.dial()
	first := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, exitrecord.KeyBytes))
	second := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, exitrecord.KeyBytes))
	c.send(`{"v":1,"type":"configure","id":1,"exitRecordKey":"` + first + `"}`)
	c.until("configure", 1)
	c.send(`{"v":1,"type":"configure","id":2,"exitRecordKey":"` + first + `"}`)
	c.until("configure", 2)
	c.send(`{"v":1,"type":"configure","id":3,"exitRecordKey":"` + second + `"}`)
	if m := c.until("error", 3); m["code"] != proto.CodeConfigureFailed {
		t.Fatalf("second key: %v", m)
	}
	c.send(`{"v":1,"type":"configure","id":4,"exitRecordKey":"c2hvcnQ="}`)
	if m := c.until("error", 4); m["code"] != proto.CodeBadMessage {
		t.Fatalf("short key: %v", m)
	}
}
