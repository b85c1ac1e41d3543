package proto

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"testing"
)

// The guest protocol's golden vectors, guest side: every request the TypeScript host writes is
// accepted, every malformed one refused with its wire code, and every message the guest may send
// is what these structs encode, field for field (src/agent/guest/vectors.test.ts holds the host to
// the same file).
type guestVectors struct {
	Requests []struct {
		Name string          `json:"name"`
		Body json.RawMessage `json:"body"`
	} `json:"requests"`
	InvalidRequests []struct {
		Name string          `json:"name"`
		Body json.RawMessage `json:"body"`
		Code string          `json:"code"`
	} `json:"invalidRequests"`
	GuestMessages []struct {
		Name string          `json:"name"`
		Body json.RawMessage `json:"body"`
	} `json:"guestMessages"`
}

func loadGuestVectors(t *testing.T) guestVectors {
	t.Helper()
	raw, err := os.ReadFile("../../../testdata/protocol/guest-messages.json")
	if err != nil {
		t.Fatal(err)
	}
	var v guestVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Requests) == 0 || len(v.InvalidRequests) == 0 || len(v.GuestMessages) == 0 {
		t.Fatal("the vectors file has an empty section")
	}
	return v
}

func TestVectorRequestsAccepted(t *testing.T) {
	for _, v := range loadGuestVectors(t).Requests {
		req, perr := DecodeRequest(v.Body)
		if perr != nil {
			t.Errorf("%s: refused: %v", v.Name, perr)
			continue
		}
		if req.ID != 1 {
			t.Errorf("%s: id %d", v.Name, req.ID)
		}
	}
}

func TestVectorInvalidRequestsRefused(t *testing.T) {
	for _, v := range loadGuestVectors(t).InvalidRequests {
		_, perr := DecodeRequest(v.Body)
		if perr == nil {
			t.Errorf("%s: accepted", v.Name)
			continue
		}
		if perr.Code != v.Code {
			t.Errorf("%s: code %s, want %s (%s)", v.Name, perr.Code, v.Code, perr.Message)
		}
	}
}

// Each message decodes into the struct the guest encodes it from, with no field left over, and
// encodes back to the same JSON.
func TestVectorGuestMessagesEncoded(t *testing.T) {
	for _, v := range loadGuestVectors(t).GuestMessages {
		var head Header
		if err := json.Unmarshal(v.Body, &head); err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		var msg any
		switch head.Type {
		case TypeHello:
			msg = &HelloReply{}
		case TypeExec:
			msg = &ExecReply{}
		case TypeExecStatus:
			msg = &ExecStatusReply{}
		case TypeError:
			msg = &ErrorReply{}
		case TypeOutput:
			msg = &OutputEvent{}
		case TypeExit:
			msg = &ExitEvent{}
		case TypeConfigure, TypeSignal, TypeShutdown:
			msg = &Header{}
		default:
			t.Fatalf("%s: no struct for type %q", v.Name, head.Type)
		}
		dec := json.NewDecoder(bytes.NewReader(v.Body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(msg); err != nil {
			t.Errorf("%s: %v", v.Name, err)
			continue
		}
		out, err := json.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		var want, got any
		_ = json.Unmarshal(v.Body, &want)
		_ = json.Unmarshal(out, &got)
		if !reflect.DeepEqual(want, got) {
			t.Errorf("%s: encodes as %s, want %s", v.Name, out, v.Body)
		}
	}
}
