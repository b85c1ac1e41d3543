package procfs

import (
	"os"
	"testing"
)

func TestParseStatCountsFieldsFromTheLastParenthesis(t *testing.T) {
	line := []byte("4242 (we (ird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615\n")
	info, err := ParseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != 'S' || info.StartTime != 987654 {
		t.Fatalf("got state %c start %d, want S 987654", info.State, info.StartTime)
	}
}

func TestParseStatRejectsTruncatedLines(t *testing.T) {
	for _, line := range []string{"", "1 (x", "1 (x) S 1 2 3"} {
		if _, err := ParseStat([]byte(line)); err == nil {
			t.Errorf("ParseStat(%q) succeeded, want an error", line)
		}
	}
}

func TestStatOfSelfIsStableAndRunning(t *testing.T) {
	a, err := Stat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	b, err := Stat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if a.StartTime == 0 || a.StartTime != b.StartTime {
		t.Fatalf("start time %d then %d, want the same non-zero value", a.StartTime, b.StartTime)
	}
	if id, err := BootID(); err != nil || len(id) < 32 {
		t.Fatalf("BootID() = %q, %v", id, err)
	}
}
