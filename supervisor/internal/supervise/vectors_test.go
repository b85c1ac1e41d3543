package supervise

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"
)

// supervisor.json and exit.json as the agent reads them (testdata/protocol/supervisor-messages.json):
// Identity and ExitRecord encode every vector field for field.
func TestVectorRecordsEncode(t *testing.T) {
	raw, err := os.ReadFile("../../../testdata/protocol/supervisor-messages.json")
	if err != nil {
		t.Fatal(err)
	}
	type entry struct {
		Name string          `json:"name"`
		Body json.RawMessage `json:"body"`
	}
	var v struct {
		Identities  []entry `json:"identities"`
		ExitRecords []entry `json:"exitRecords"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Identities) == 0 || len(v.ExitRecords) == 0 {
		t.Fatal("the vectors file has an empty section")
	}
	check := func(name string, body json.RawMessage, into any) {
		if err := json.Unmarshal(body, into); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out, err := json.Marshal(into)
		if err != nil {
			t.Fatal(err)
		}
		var got, want any
		_ = json.Unmarshal(out, &got)
		_ = json.Unmarshal(body, &want)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: encodes as\n%s\nwant\n%s", name, out, body)
		}
	}
	for _, e := range v.Identities {
		check("supervisor.json "+e.Name, e.Body, &Identity{})
	}
	for _, e := range v.ExitRecords {
		check("exit.json "+e.Name, e.Body, &ExitRecord{})
	}
}
