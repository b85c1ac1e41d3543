package proto

import (
	"strings"
	"testing"
)

func TestDecodeRequestAcceptsEveryRequestType(t *testing.T) {
	cases := map[string]string{
		"hello":       `{"v":1,"type":"hello","id":1,"versions":[1],"client":"t"}`,
		"configure":   `{"v":1,"type":"configure","id":2,"hostname":"vm-1","network":{"interface":"eth0","address":"10.0.0.2/30","gateway":"10.0.0.1","dns":["10.0.0.1"],"mac":"02:00:0a:00:00:02"},"unixTimeMs":1796601600000,"entropySeed":"AAECAwQFBgcICQoLDA0ODw=="}`,
		"exec":        `{"v":1,"type":"exec","id":3,"execId":"vm-1:run.1","argv":["/bin/true"],"env":{"A":"b"},"cwd":"/tmp","uid":1000,"gid":1000}`,
		"exec.status": `{"v":1,"type":"exec.status","id":4,"execId":"x"}`,
		"signal":      `{"v":1,"type":"signal","id":5,"execId":"x","signal":"SIGTERM"}`,
		"shutdown":    `{"v":1,"type":"shutdown","id":6,"mode":"reboot","future":"ignored"}`,
	}
	for typ, body := range cases {
		req, err := DecodeRequest([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if req.Type != typ || req.ID == 0 {
			t.Fatalf("%s: decoded %+v", typ, req)
		}
	}
	req, _ := DecodeRequest([]byte(cases["configure"]))
	if len(req.Configure.Seed) != 16 {
		t.Fatalf("seed decoded to %d bytes", len(req.Configure.Seed))
	}
}

func TestDecodeRequestRejectsMalformedInputWithCodeAndID(t *testing.T) {
	cases := []struct {
		body string
		code string
		id   uint32
	}{
		{``, CodeBadJSON, 0},
		{`{"v":1,`, CodeBadJSON, 0},
		{"{\"v\":1,\"type\":\"hello\",\"id\":1,\"client\":\"\xff\"}", CodeBadJSON, 0},
		{`[1,2]`, CodeBadMessage, 0},
		{`{"v":1,"type":"hello"}`, CodeBadMessage, 0},
		{`{"v":1,"type":"hello","id":0,"versions":[1]}`, CodeBadMessage, 0},
		{`{"v":1,"type":"hello","id":-1,"versions":[1]}`, CodeBadMessage, 0},
		{`{"v":1,"type":"hello","id":4294967296,"versions":[1]}`, CodeBadMessage, 0},
		{`{"v":1,"type":"hello","id":1.5,"versions":[1]}`, CodeBadMessage, 0},
		{`{"v":2,"type":"hello","id":7,"versions":[2]}`, CodeUnsupportedVersion, 7},
		{`{"v":"1","type":"hello","id":7,"versions":[1]}`, CodeBadMessage, 7},
		{`{"v":1,"type":"launch","id":8}`, CodeUnknownType, 8},
		{`{"v":1,"type":5,"id":8}`, CodeBadMessage, 8},
		{`{"v":1,"type":"hello","id":9,"versions":[]}`, CodeBadMessage, 9},
		{`{"v":1,"type":"exec","id":10,"execId":"a","argv":"ls","env":{}}`, CodeBadMessage, 10},
		{`{"v":1,"type":"exec","id":11,"execId":"a","argv":[],"env":{}}`, CodeBadMessage, 11},
		{`{"v":1,"type":"exec","id":12,"execId":"a b","argv":["ls"],"env":{}}`, CodeBadMessage, 12},
		{`{"v":1,"type":"exec","id":13,"execId":"a","argv":["ls"]}`, CodeBadMessage, 13},
		{`{"v":1,"type":"exec","id":14,"execId":"a","argv":["ls"],"env":{"A=B":"c"}}`, CodeBadMessage, 14},
		{`{"v":1,"type":"exec","id":15,"execId":"a","argv":["ls"],"env":{"A":1}}`, CodeBadMessage, 15},
		{`{"v":1,"type":"exec","id":16,"execId":"a","argv":["ls"],"env":{},"cwd":"rel"}`, CodeBadMessage, 16},
		{`{"v":1,"type":"exec","id":17,"execId":"a","argv":["ls"],"env":{},"uid":-1}`, CodeBadMessage, 17},
		{`{"v":1,"type":"exec","id":18,"execId":"a","argv":[""],"env":{}}`, CodeBadMessage, 18},
		{`{"v":1,"type":"exec","id":18,"execId":"a","argv":["ls"],"env":{},"shutdownAfterExit":"halt"}`, CodeBadMessage, 18},
		{`{"v":1,"type":"exec","id":18,"execId":"a","argv":["ls"],"env":{},"uid":1000}`, CodeBadMessage, 18},
		{`{"v":1,"type":"exec","id":18,"execId":"a","argv":["ls"],"env":{},"gid":1000}`, CodeBadMessage, 18},
		{`{"v":1,"type":"exec","id":18,"execId":"a","argv":["ls"],"env":{},"uid":0}`, CodeBadMessage, 18},
		{`{"v":1,"type":"signal","id":19,"execId":"a","signal":"SIGSTOP"}`, CodeBadMessage, 19},
		{`{"v":1,"type":"shutdown","id":20,"mode":"halt"}`, CodeBadMessage, 20},
		{`{"v":1,"type":"configure","id":21,"hostname":"-bad-"}`, CodeBadMessage, 21},
		{`{"v":1,"type":"configure","id":22,"network":{"interface":"eth0","address":"10.0.0.2"}}`, CodeBadMessage, 22},
		{`{"v":1,"type":"configure","id":23,"entropySeed":"AAEC"}`, CodeBadMessage, 23},
		{`{"v":1,"type":"configure","id":24,"entropySeed":"not base64!"}`, CodeBadMessage, 24},
		{`{"v":1,"type":"configure","id":28,"unixTimeMs":1000}`, CodeBadMessage, 28},
		{`{"v":1,"type":"configure","id":26,"network":{"interface":"eth0","address":"10.0.0.2/8","mac":"03:00:00:00:00:01"}}`, CodeBadMessage, 26},
		{`{"v":1,"type":"configure","id":27,"network":{"interface":"eth0","address":"10.0.0.2/8","mac":"02:00:00:00:00"}}`, CodeBadMessage, 27},
		{`{"v":1,"type":"configure","id":25,"network":{"interface":"an-interface-name-too-long","address":"10.0.0.2/8"}}`, CodeBadMessage, 25},
	}
	for _, c := range cases {
		_, err := DecodeRequest([]byte(c.body))
		if err == nil {
			t.Fatalf("%s: accepted", c.body)
		}
		if err.Code != c.code || err.ID != c.id {
			t.Fatalf("%s: got %s id %d (%s), want %s id %d", c.body, err.Code, err.ID, err.Message, c.code, c.id)
		}
	}
}

func TestDecodeRequestNeverEchoesEnvValues(t *testing.T) {
	const sentinel = "SENTINEL-SECRET-VALUE"
	bodies := []string{
		`{"v":1,"type":"exec","id":1,"execId":"a","argv":["ls"],"env":{"A":"` + sentinel + `\u0000"}}`,
		`{"v":1,"type":"exec","id":1,"execId":"a","argv":["ls"],"env":{"A":"` + sentinel + `"},"uid":"x"}`,
		`{"v":1,"type":"exec","id":1,"execId":"a","argv":["ls"],"env":["` + sentinel + `"]}`,
	}
	for _, body := range bodies {
		_, err := DecodeRequest([]byte(body))
		if err == nil {
			t.Fatalf("%s: accepted", body)
		}
		if strings.Contains(err.Error(), sentinel) {
			t.Fatalf("error echoes the env value: %s", err.Error())
		}
	}
}

func TestDecodeRequestRejectsKeysThatDifferOnlyInCase(t *testing.T) {
	for _, body := range []string{
		`{"v":1,"type":"hello","id":1,"ID":2,"versions":[1]}`,
		`{"v":1,"type":"hello","id":1,"id":2,"versions":[1]}`,
		`{"v":1,"type":"configure","id":1,"network":{"interface":"eth0","Interface":"eth1","address":"10.0.0.2/8"}}`,
		`{"v":1,"type":"exec","id":1,"execId":"a","argv":["ls"],"env":{"A":"1","A":"2"}}`,
	} {
		if _, err := DecodeRequest([]byte(body)); err == nil || err.Code != CodeBadMessage {
			t.Fatalf("%s: got %v, want bad_message", body, err)
		}
	}
	ok := `{"v":1,"type":"exec","id":1,"execId":"a","argv":["ls"],"env":{"path":"1","PATH":"2"}}`
	req, err := DecodeRequest([]byte(ok))
	if err != nil || req.Exec.Env["path"] != "1" || req.Exec.Env["PATH"] != "2" {
		t.Fatalf("env keys differing in case must both be kept: %v", err)
	}
}
