package main

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// fatalSignals end a Go program by default; as PID 1 that would panic the kernel.
var fatalSignals = []os.Signal{syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE}

// catchFatalSignals keeps the agent alive on fatalSignals by handling them into a drained channel.
// Not signal.Ignore: SIG_IGN survives execve, so every exec would start with those signals
// ignored (a job's SIGPIPE or SIGHUP would silently do nothing). A handled signal is reset to the
// default action in the child by execve, so execs start clean.
func catchFatalSignals(log *slog.Logger) {
	sink := make(chan os.Signal, 8)
	signal.Notify(sink, fatalSignals...)
	go func() {
		for sig := range sink {
			log.Debug("ignoring signal", "signal", unix.SignalName(sig.(syscall.Signal)))
		}
	}()
}
