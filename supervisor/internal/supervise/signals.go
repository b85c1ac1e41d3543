package supervise

import (
	"fmt"
	"syscall"
)

// allowed is the set of signals a client may ask for: enough to stop a VMM or poke it, nothing that
// would let a confused client suspend it forever without a way to resume.
var allowed = map[string]syscall.Signal{
	"SIGTERM": syscall.SIGTERM,
	"SIGKILL": syscall.SIGKILL,
	"SIGINT":  syscall.SIGINT,
	"SIGHUP":  syscall.SIGHUP,
	"SIGQUIT": syscall.SIGQUIT,
	"SIGUSR1": syscall.SIGUSR1,
	"SIGUSR2": syscall.SIGUSR2,
}

func parseSignal(name string) (syscall.Signal, error) {
	sig, ok := allowed[name]
	if !ok {
		return 0, fmt.Errorf("signal %q is not one of SIGTERM SIGKILL SIGINT SIGHUP SIGQUIT SIGUSR1 SIGUSR2", name)
	}
	return sig, nil
}

var names = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT", syscall.SIGILL: "SIGILL",
	syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE",
	syscall.SIGKILL: "SIGKILL", syscall.SIGUSR1: "SIGUSR1", syscall.SIGSEGV: "SIGSEGV", syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM", syscall.SIGSTKFLT: "SIGSTKFLT",
	syscall.SIGCHLD: "SIGCHLD", syscall.SIGCONT: "SIGCONT", syscall.SIGSTOP: "SIGSTOP", syscall.SIGTSTP: "SIGTSTP",
	syscall.SIGTTIN: "SIGTTIN", syscall.SIGTTOU: "SIGTTOU", syscall.SIGURG: "SIGURG", syscall.SIGXCPU: "SIGXCPU",
	syscall.SIGXFSZ: "SIGXFSZ", syscall.SIGVTALRM: "SIGVTALRM", syscall.SIGPROF: "SIGPROF", syscall.SIGWINCH: "SIGWINCH",
	syscall.SIGIO: "SIGIO", syscall.SIGPWR: "SIGPWR", syscall.SIGSYS: "SIGSYS",
}

// signalName is the name Node.js uses for a signal (its NodeJS.Signals), or "SIG<n>" for real-time ones.
func signalName(sig syscall.Signal) string {
	if n, ok := names[sig]; ok {
		return n
	}
	return fmt.Sprintf("SIG%d", int(sig))
}
