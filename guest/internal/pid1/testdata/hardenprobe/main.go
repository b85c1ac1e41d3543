// Command hardenprobe runs pid1.Harden in a process of its own (it changes the process for good)
// and reports what a child started afterwards holds. Built by harden_test.go with CGO_ENABLED=0,
// as the guest agent is: AllThreadsSyscall refuses cgo binaries (the race detector's included).
package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"
	"imp.dev/guest/internal/pid1"
)

func main() {
	if err := pid1.Harden(); err != nil {
		fmt.Println("harden:", err)
		os.Exit(1)
	}
	dumpable, _ := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	out, err := exec.Command("/bin/sh", "-c", "grep CapBnd /proc/self/status").Output()
	if err != nil {
		fmt.Println("child:", err)
		os.Exit(1)
	}
	fmt.Printf("dumpable=%d child=%s\n", dumpable, strings.TrimSpace(strings.TrimPrefix(string(out), "CapBnd:")))
}
