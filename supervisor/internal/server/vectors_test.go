package server

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"
)

// The supervisor protocol's golden vectors, supervisor side: every request line the agent writes
// decodes into Request and encodes back byte for byte, and every message the agent parses is what
// Message encodes, field for field (src/agent/supervisor/vectors.test.ts holds the agent to the
// same file).
type protocolVectors struct {
	Requests []struct {
		Name string `json:"name"`
		Line string `json:"line"`
	} `json:"requests"`
	Messages []struct {
		Name string          `json:"name"`
		Body json.RawMessage `json:"body"`
	} `json:"messages"`
}

func loadVectors(t *testing.T) protocolVectors {
	t.Helper()
	raw, err := os.ReadFile("../../../testdata/protocol/supervisor-messages.json")
	if err != nil {
		t.Fatal(err)
	}
	var v protocolVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Requests) == 0 || len(v.Messages) == 0 {
		t.Fatal("the vectors file has an empty section")
	}
	return v
}

// sameJSON compares two JSON documents as values (key order aside).
func sameJSON(t *testing.T, name string, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s: encodes as\n%s\nwant\n%s", name, got, want)
	}
}

func TestVectorRequestsDecode(t *testing.T) {
	for _, v := range loadVectors(t).Requests {
		var req Request
		if err := json.Unmarshal([]byte(v.Line), &req); err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		if req.Op != "status" && req.Op != "signal" {
			t.Fatalf("%s: op %q is not one the server answers", v.Name, req.Op)
		}
		back, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if string(back) != v.Line {
			t.Fatalf("%s: decoded as %s, want %s", v.Name, back, v.Line)
		}
	}
}

func TestVectorMessagesEncode(t *testing.T) {
	for _, v := range loadVectors(t).Messages {
		var m Message
		if err := json.Unmarshal(v.Body, &m); err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, v.Name, out, v.Body)
	}
}
