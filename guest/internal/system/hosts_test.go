package system

import "testing"

func TestHostsWithKeepsTheImagesLinesAndReplacesItsOwn(t *testing.T) {
	image := "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n10.0.0.5\tregistry.internal\n"
	once := hostsWith(image, "vm-a")
	want := image + "127.0.1.1\tvm-a\t# imp-guest\n"
	if once != want {
		t.Fatalf("got %q\nwant %q", once, want)
	}
	if twice := hostsWith(once, "vm-b"); twice != image+"127.0.1.1\tvm-b\t# imp-guest\n" {
		t.Fatalf("a second configure did not replace its line: %q", twice)
	}
}

func TestHostsWithGivesAnImageWithoutTheFileLocalhostToo(t *testing.T) {
	if got := hostsWith("", "vm-a"); got != "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tvm-a\t# imp-guest\n" {
		t.Fatalf("got %q", got)
	}
}
