package system

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"imp.dev/guest/internal/proto"
)

// Linux applies configure to the running kernel. Every step is idempotent (replace, not add): a
// new address on an interface replaces the one this agent set there before. Configure calls are
// serialised. Use it by pointer.
type Linux struct {
	// Root is prepended to /etc/resolv.conf (the overlay root is "/").
	Root string
	Log  *slog.Logger

	mu    sync.Mutex
	addrs map[string]*netlink.Addr // interface name -> the address we set there last
}

func (l *Linux) Configure(_ context.Context, req *proto.ConfigureRequest) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if req.Seed != nil {
		if err := AddEntropy(req.Seed); err != nil {
			return fmt.Errorf("entropy: %w", err)
		}
		l.Log.Info("entropy seeded", "bytes", len(req.Seed))
	}
	if req.UnixTimeMs != nil {
		ts := unix.NsecToTimespec(*req.UnixTimeMs * int64(time.Millisecond))
		if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
			return fmt.Errorf("clock: %w", err)
		}
		l.Log.Info("clock set", "unixTimeMs", *req.UnixTimeMs)
	}
	if req.Hostname != nil {
		if err := unix.Sethostname([]byte(*req.Hostname)); err != nil {
			return fmt.Errorf("hostname: %w", err)
		}
		if err := writeHostname(l.Root, *req.Hostname); err != nil {
			return fmt.Errorf("hostname files: %w", err)
		}
		l.Log.Info("hostname set", "hostname", *req.Hostname)
	}
	if req.Network != nil {
		if err := l.configureNetwork(req.Network); err != nil {
			return fmt.Errorf("network %s: %w", req.Network.Interface, err)
		}
		if err := writeResolvConf(filepath.Join(l.Root, "etc/resolv.conf"), req.Network.DNS); err != nil {
			return fmt.Errorf("resolv.conf: %w", err)
		}
		l.Log.Info("network configured", "interface", req.Network.Interface, "address", req.Network.Address, "gateway", req.Network.Gateway, "dns", len(req.Network.DNS))
	}
	return nil
}

// LoopbackUp brings up lo; harmless if already up.
func LoopbackUp() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	return netlink.LinkSetUp(lo)
}

func (l *Linux) configureNetwork(n *proto.NetworkConfig) error {
	if err := LoopbackUp(); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	link, err := netlink.LinkByName(n.Interface)
	if err != nil {
		return fmt.Errorf("find link: %w", err)
	}
	if err := setMAC(link, n.MAC); err != nil {
		return fmt.Errorf("mac: %w", err)
	}
	addr, err := netlink.ParseAddr(n.Address)
	if err != nil {
		return fmt.Errorf("parse address: %w", err)
	}
	if err := netlink.AddrReplace(link, addr); err != nil {
		return fmt.Errorf("set address: %w", err)
	}
	// AddrReplace only replaces an equal address; a different one is added beside. Remove the one
	// we set before (only that: addresses the kernel or anyone else set stay). It is forgotten
	// only once removed, so a failed removal is retried by the next configure.
	if prev := l.addrs[n.Interface]; prev != nil && prev.IPNet.String() != addr.IPNet.String() {
		if err := netlink.AddrDel(link, prev); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return fmt.Errorf("remove previous address %s: %w", prev.IPNet, err)
		}
	}
	if l.addrs == nil {
		l.addrs = map[string]*netlink.Addr{}
	}
	l.addrs[n.Interface] = addr
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("link up: %w", err)
	}
	if n.Gateway == "" {
		return nil
	}
	gw := net.ParseIP(n.Gateway)
	route := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: gw}
	if gw.To4() == nil {
		route.Family = netlink.FAMILY_V6
	}
	if err := netlink.RouteReplace(route); err != nil {
		return fmt.Errorf("default route: %w", err)
	}
	return nil
}

// setMAC gives link the hardware address mac ("" = keep), taking it down first (not every driver
// changes the address of a running link) and flushing the neighbours learnt under the old one; the
// caller brings the link up again. The same address again is a no-op.
func setMAC(link netlink.Link, mac string) error {
	if mac == "" {
		return nil
	}
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return err
	}
	if bytes.Equal(link.Attrs().HardwareAddr, hw) {
		return nil
	}
	if err := netlink.LinkSetDown(link); err != nil {
		return fmt.Errorf("link down: %w", err)
	}
	if err := netlink.LinkSetHardwareAddr(link, hw); err != nil {
		return err
	}
	neighbours, err := netlink.NeighList(link.Attrs().Index, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("list neighbours: %w", err)
	}
	for i := range neighbours {
		if err := netlink.NeighDel(&neighbours[i]); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("flush neighbour: %w", err)
		}
	}
	return nil
}

// writeResolvConf replaces the file atomically (a symlink there is replaced, not followed).
func writeResolvConf(path string, dns []string) error {
	var b strings.Builder
	b.WriteString("# written by imp-guest\n")
	for _, d := range dns {
		b.WriteString("nameserver " + d + "\n")
	}
	return replaceFile(path, b.String())
}

// rndReseedCRNG is RNDRESEEDCRNG, _IO('R', 0x07) in linux/random.h (not in x/sys/unix).
const rndReseedCRNG = 0x5207

// AddEntropy credits seed to the kernel pool with RNDADDENTROPY (8 bits per byte), then forces the
// CRNG to reseed from the pool with RNDRESEEDCRNG. Without the reseed, crediting changes nothing the
// next getrandom() returns until the kernel's own reseed interval (up to a minute) has passed: two
// VMs restored from one memory snapshot would hand out the same random bytes until then.
func AddEntropy(seed []byte) error {
	if len(seed) == 0 {
		return errors.New("empty seed")
	}
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	info := make([]byte, 8+len(seed)+3)
	binary.NativeEndian.PutUint32(info[0:], uint32(len(seed)*8))
	binary.NativeEndian.PutUint32(info[4:], uint32(len(seed)))
	copy(info[8:], seed)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDADDENTROPY, uintptr(unsafe.Pointer(&info[0])))
	clear(info)
	if errno != 0 {
		return errno
	}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), rndReseedCRNG, 0); errno != 0 {
		return fmt.Errorf("reseed: %w", errno)
	}
	return nil
}
