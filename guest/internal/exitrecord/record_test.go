package exitrecord

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// The golden vectors both the guest (Go) and the host (TypeScript) test against.
type vectors struct {
	Key   string `json:"key"`
	Valid []struct {
		Name    string  `json:"name"`
		Payload Payload `json:"payload"`
		Line    string  `json:"line"`
	} `json:"valid"`
	Invalid []struct {
		Name string `json:"name"`
		Line string `json:"line"`
	} `json:"invalid"`
}

func loadVectors(t *testing.T) (vectors, []byte) {
	t.Helper()
	raw, err := os.ReadFile("../../../testdata/protocol/exit-records.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	key, err := base64.StdEncoding.DecodeString(v.Key)
	if err != nil {
		t.Fatal(err)
	}
	return v, key
}

func TestLineMatchesTheGoldenVectors(t *testing.T) {
	v, key := loadVectors(t)
	for _, c := range v.Valid {
		got, err := Line(key, c.Payload)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.Line {
			t.Errorf("%s: Line() = %q, want %q", c.Name, got, c.Line)
		}
		p, ok := Verify(key, c.Line)
		if !ok || p != c.Payload {
			t.Errorf("%s: Verify() = %+v %v, want %+v", c.Name, p, ok, c.Payload)
		}
	}
}

func TestVerifyRefusesForgedAndMalformedLines(t *testing.T) {
	v, key := loadVectors(t)
	for _, c := range v.Invalid {
		if p, ok := Verify(key, c.Line); ok {
			t.Errorf("%s: Verify accepted %q as %+v", c.Name, c.Line, p)
		}
	}
}

func TestWriterWritesNothingWithoutAKey(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out)
	if err := w.Write(Payload{ExecID: "x", ExitCode: 0}); err != nil || out.Len() != 0 {
		t.Fatalf("wrote %q (err %v) without a key", out.String(), err)
	}
}

func TestWriterKeepsTheFirstKeyOfTheBoot(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out)
	first := bytes.Repeat([]byte{1}, KeyBytes)
	if err := w.SetKey(first); err != nil {
		t.Fatal(err)
	}
	if err := w.SetKey(first); err != nil {
		t.Fatalf("the same key again must be a no-op, got %v", err)
	}
	if err := w.SetKey(bytes.Repeat([]byte{2}, KeyBytes)); err != ErrKeySet {
		t.Fatalf("a second key must be refused, got %v", err)
	}
	if err := w.Write(Payload{ExecID: "imp-run-1", ExitCode: 3}); err != nil {
		t.Fatal(err)
	}
	var records []string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, Prefix) {
			records = append(records, l)
		}
	}
	if len(records) != 2 {
		t.Fatalf("want the record written twice, got %q", out.String())
	}
	for _, l := range records {
		if p, ok := Verify(first, l); !ok || p.ExitCode != 3 {
			t.Fatalf("record %q does not verify with the first key", l)
		}
	}
}

func TestSetKeyRefusesAWrongLength(t *testing.T) {
	if err := NewWriter(&bytes.Buffer{}).SetKey([]byte("short")); err == nil {
		t.Fatal("a 5-byte key was accepted")
	}
}
