// Command imp-guest is the guest agent: PID 1 inside an Imp VM (booted with init=/.imp/imp-guest),
// or an ordinary process for tests (--mode=process). This file is wiring only.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"imp.dev/guest/internal/execmgr"
	"imp.dev/guest/internal/exitrecord"
	"imp.dev/guest/internal/pid1"
	"imp.dev/guest/internal/server"
	"imp.dev/guest/internal/system"
	"imp.dev/guest/internal/transport"
)

const agentVersion = "imp-guest/0.1.0"

type config struct {
	mode       string // pid1 | process
	listenUnix string
	listenTCP  string
	vsockPort  int
	serialName string
	logLevel   string
}

func parseFlags(args []string, isPID1 bool) (config, error) {
	fs := flag.NewFlagSet("imp-guest", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	mode := fs.String("mode", "auto", "pid1 | process | auto (pid1 when running as PID 1)")
	cfg := config{}
	fs.StringVar(&cfg.listenUnix, "listen-unix", "", "also serve on this Unix socket path (tests)")
	fs.StringVar(&cfg.listenTCP, "listen-tcp", "", "also serve on this TCP address, loopback only (tests)")
	fs.IntVar(&cfg.vsockPort, "vsock-port", -1, "vsock port; -1 = 10700 in pid1 mode, off otherwise; 0 = off")
	fs.StringVar(&cfg.serialName, "serial-name", "imp.agent", `virtio-serial port name to serve; "" = off`)
	fs.StringVar(&cfg.logLevel, "log-level", "info", "debug | info | warn | error")
	err := fs.Parse(args)
	cfg.mode = *mode
	if cfg.mode == "auto" {
		cfg.mode = map[bool]string{true: "pid1", false: "process"}[isPID1]
	}
	if cfg.vsockPort < 0 {
		cfg.vsockPort = map[bool]int{true: transport.VsockPort, false: 0}[cfg.mode == "pid1"]
	}
	return cfg, err
}

func main() {
	isPID1 := os.Getpid() == 1
	cfg, flagErr := parseFlags(os.Args[1:], isPID1)
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.logLevel))
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if flagErr != nil {
		// PID 1 must never exit over a bad flag (the kernel may pass stray words): log and go on.
		log.Warn("ignoring bad command line", "error", flagErr)
		if !isPID1 {
			os.Exit(2)
		}
	}
	if err := run(cfg, log); err != nil {
		log.Error("guest agent failed", "error", err)
		if cfg.mode == "pid1" {
			// A PID 1 that exits panics the kernel; end the machine the way its VMM expects.
			pid1.PowerOff(log, pid1.ReadCmdline().ShutdownMode())
		}
		os.Exit(1)
	}
}

func run(cfg config, log *slog.Logger) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sys server.System
	var srv *server.Server
	var shutdown func(mode string)
	unaskedMode := "poweroff" // for shutdowns the host did not ask for (SIGTERM, Ctrl-Alt-Del)
	if cfg.mode == "pid1" {
		catchFatalSignals(log)
		cmdline, err := pid1.Boot(log, system.LoopbackUp)
		if err != nil {
			return err
		}
		unaskedMode = cmdline.ShutdownMode()
		sys = &system.Linux{Root: "/", Log: log}
		shutdown = func(mode string) { stopExecs(srv, log); pid1.PowerOff(log, mode) }
	} else {
		sys = system.NewDry(log)
		// Orphans of our execs come back to us, as they would to PID 1.
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
		shutdown = func(string) { stopExecs(srv, log); cancel() }
	}
	reaper := execmgr.NewReaper(log)
	go reaper.Run(ctx)
	// Exit records go to stderr: the serial console in a VM, where a restarted host agent finds them.
	srv = server.New(reaper, log, server.Options{Agent: agentVersion, System: sys, Shutdown: shutdown, Records: exitrecord.NewWriter(os.Stderr)})
	if err := startListeners(ctx, cfg, srv, log); err != nil {
		return err
	}
	go forwardSignals(ctx, srv, log, func() { shutdown(unaskedMode) })
	log.Info("guest agent serving", "version", agentVersion, "mode", cfg.mode, "pid", os.Getpid())
	<-ctx.Done()
	return nil
}

// stopExecs asks every exec to stop and waits a bounded time; PowerOff kills what remains.
func stopExecs(srv *server.Server, log *slog.Logger) {
	srv.Execs().StopAccepting()
	srv.Execs().SignalAll(syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if !srv.Execs().WaitAll(ctx) {
		log.Warn("execs still running after the grace period; killing them")
	}
}

// forwardSignals passes SIGTERM/SIGINT (Ctrl-Alt-Del arrives as SIGINT) to the execs, lets them
// finish (bounded), then shuts down.
func forwardSignals(ctx context.Context, srv *server.Server, log *slog.Logger, shutdown func()) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-ctx.Done():
		return
	case sig := <-sigs:
		s := sig.(syscall.Signal)
		log.Info("forwarding signal to execs", "signal", unix.SignalName(s))
		srv.Execs().StopAccepting()
		srv.ForwardSignal(s)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		srv.Execs().WaitAll(wctx)
		cancel()
		shutdown()
	}
}

func startListeners(ctx context.Context, cfg config, srv *server.Server, log *slog.Logger) error {
	if cfg.listenUnix != "" {
		_ = os.Remove(cfg.listenUnix)
		ln, err := net.Listen("unix", cfg.listenUnix)
		if err != nil {
			return fmt.Errorf("cannot listen on unix socket %s: %w", cfg.listenUnix, err)
		}
		go serve(ctx, srv, ln, "unix", log)
	}
	if cfg.listenTCP != "" {
		host, _, err := net.SplitHostPort(cfg.listenTCP)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			return fmt.Errorf("cannot listen on %s: --listen-tcp accepts loopback addresses only", cfg.listenTCP)
		}
		ln, err := net.Listen("tcp", cfg.listenTCP)
		if err != nil {
			return fmt.Errorf("cannot listen on %s: %w", cfg.listenTCP, err)
		}
		go serve(ctx, srv, ln, "tcp", log)
	}
	if cfg.vsockPort > 0 {
		ln, err := transport.ListenVsock(uint32(cfg.vsockPort), log)
		if err != nil {
			// A VM without vsock may still have the serial port; keep going.
			log.Warn("cannot listen on vsock", "port", cfg.vsockPort, "error", err)
		} else {
			go serve(ctx, srv, ln, "vsock", log)
		}
	}
	if cfg.serialName != "" {
		if path := transport.FindSerialPort("/sys", cfg.serialName); path != "" {
			port, err := transport.OpenSerialPort(path)
			if err != nil {
				log.Warn("cannot open virtio-serial port", "path", path, "error", err)
			} else {
				log.Info("serving virtio-serial port", "path", path)
				go transport.ServeSerial(ctx, port, func(ctx context.Context, rw io.ReadWriteCloser) {
					srv.ServeConn(ctx, rw, "serial:"+strings.TrimPrefix(path, "/dev/"))
				})
			}
		}
	}
	return nil
}

func serve(ctx context.Context, srv *server.Server, ln net.Listener, kind string, log *slog.Logger) {
	if err := srv.Serve(ctx, ln, kind); err != nil && ctx.Err() == nil {
		log.Error("listener stopped", "listener", kind, "error", err)
	}
}
