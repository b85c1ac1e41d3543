package system

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"imp.dev/guest/internal/proto"
)

// inFreshNamespaces runs fn on a locked OS thread moved into new network and UTS namespaces, so
// the real netlink and sethostname calls change nothing on the machine running the tests. The
// thread is never unlocked: it dies with the goroutine instead of returning to the pool.
func inFreshNamespaces(t *testing.T, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET | unix.CLONE_NEWUTS); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		fn()
	}()
	<-done
}

func TestLinuxConfigureAppliesHostnameAddressRouteAndResolvConf(t *testing.T) {
	root := t.TempDir()
	var logs bytes.Buffer
	sys := &Linux{Root: root, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	hostname := "imp-test-host"
	req := &proto.ConfigureRequest{
		Hostname: &hostname,
		Network:  &proto.NetworkConfig{Interface: "lo", Address: "192.0.2.9/24", Gateway: "192.0.2.1", DNS: []string{"192.0.2.53", "2001:db8::53"}},
		Seed:     bytes.Repeat([]byte{0x5a}, 32),
	}
	inFreshNamespaces(t, func() {
		for range 2 { // the second run proves it is idempotent
			if err := sys.Configure(context.Background(), req); err != nil {
				t.Errorf("Configure: %v", err)
				return
			}
		}
		var uts unix.Utsname
		_ = unix.Uname(&uts)
		if got := string(bytes.TrimRight(uts.Nodename[:], "\x00")); got != hostname {
			t.Errorf("hostname = %q", got)
		}
		lo, _ := netlink.LinkByName("lo")
		if lo.Attrs().Flags&net.FlagUp == 0 {
			t.Error("lo is not up")
		}
		addrs, _ := netlink.AddrList(lo, netlink.FAMILY_V4)
		found := 0
		for _, a := range addrs {
			if a.IPNet.String() == "192.0.2.9/24" {
				found++
			}
		}
		if found != 1 {
			t.Errorf("address present %d times: %v", found, addrs)
		}
		routes, _ := netlink.RouteList(lo, netlink.FAMILY_V4)
		hasDefault := false
		for _, r := range routes {
			if (r.Dst == nil || r.Dst.String() == "0.0.0.0/0") && r.Gw.String() == "192.0.2.1" {
				hasDefault = true
			}
		}
		if !hasDefault {
			t.Errorf("no default route via the gateway: %v", routes)
		}
	})
	hosts, err := os.ReadFile(filepath.Join(root, "etc/hosts"))
	if err != nil || strings.Count(string(hosts), hostname) != 1 || !strings.Contains(string(hosts), "127.0.1.1\t"+hostname) || !strings.Contains(string(hosts), "127.0.0.1\tlocalhost") {
		t.Fatalf("/etc/hosts = %q, %v", hosts, err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "etc/hostname")); err != nil || string(b) != hostname+"\n" {
		t.Fatalf("/etc/hostname = %q, %v", b, err)
	}
	b, err := os.ReadFile(filepath.Join(root, "etc/resolv.conf"))
	if err != nil || string(b) != "# written by imp-guest\nnameserver 192.0.2.53\nnameserver 2001:db8::53\n" {
		t.Fatalf("resolv.conf = %q, %v", b, err)
	}
	if bytes.Contains(logs.Bytes(), []byte("ZZZZ")) || bytes.Contains(logs.Bytes(), []byte("WlpaWlpa")) {
		t.Fatal("the seed reached the log")
	}
}

func TestLinuxConfigureNamesTheFailingStep(t *testing.T) {
	sys := &Linux{Root: t.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	inFreshNamespaces(t, func() {
		err := sys.Configure(context.Background(), &proto.ConfigureRequest{Network: &proto.NetworkConfig{Interface: "nosuch0", Address: "192.0.2.9/24"}})
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte("network nosuch0: find link")) {
			t.Errorf("err = %v", err)
		}
	})
}

func TestLinuxConfigureWithANewAddressReplacesTheOneItSetBefore(t *testing.T) {
	sys := &Linux{Root: t.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	configure := func(address, gateway string) {
		req := &proto.ConfigureRequest{Network: &proto.NetworkConfig{Interface: "lo", Address: address, Gateway: gateway}}
		if err := sys.Configure(context.Background(), req); err != nil {
			t.Errorf("Configure %s: %v", address, err)
		}
	}
	inFreshNamespaces(t, func() {
		lo, _ := netlink.LinkByName("lo")
		other, _ := netlink.ParseAddr("203.0.113.5/32") // set by someone else: must survive
		configure("192.0.2.9/24", "192.0.2.1")
		if err := netlink.AddrAdd(lo, other); err != nil {
			t.Errorf("add foreign address: %v", err)
			return
		}
		configure("198.51.100.7/24", "198.51.100.1")
		configure("198.51.100.7/24", "198.51.100.1") // repeating it changes nothing
		configure("198.51.100.7/28", "198.51.100.1") // same IP, new prefix: still one address
		addrs, _ := netlink.AddrList(lo, netlink.FAMILY_V4)
		var got []string
		for _, a := range addrs {
			got = append(got, a.IPNet.String())
		}
		sort.Strings(got)
		if strings.Join(got, " ") != "127.0.0.1/8 198.51.100.7/28 203.0.113.5/32" {
			t.Errorf("addresses on lo: %v", got)
		}
		routes, _ := netlink.RouteList(lo, netlink.FAMILY_V4)
		gateways := 0
		for _, r := range routes {
			if r.Dst == nil || r.Dst.String() == "0.0.0.0/0" {
				gateways++
				if r.Gw.String() != "198.51.100.1" {
					t.Errorf("default route via %s", r.Gw)
				}
			}
		}
		if gateways != 1 {
			t.Errorf("%d default routes: %v", gateways, routes)
		}
	})
}

func TestLinuxConfigureGivesTheInterfaceTheLeasedMAC(t *testing.T) {
	sys := &Linux{Root: t.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	inFreshNamespaces(t, func() {
		// A restored VM wakes with its template's MAC; the host leased it another one.
		template, _ := net.ParseMAC("02:00:00:00:00:01")
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0", HardwareAddr: template}, PeerName: "peer0"}); err != nil {
			t.Errorf("add veth pair: %v", err)
			return
		}
		req := &proto.ConfigureRequest{Network: &proto.NetworkConfig{Interface: "eth0", Address: "192.0.2.9/30", MAC: "02:aa:bb:cc:dd:ee"}}
		for range 2 { // the same MAC again is a no-op
			if err := sys.Configure(context.Background(), req); err != nil {
				t.Errorf("Configure: %v", err)
				return
			}
		}
		link, _ := netlink.LinkByName("eth0")
		if got := link.Attrs().HardwareAddr.String(); got != "02:aa:bb:cc:dd:ee" {
			t.Errorf("MAC = %s", got)
		}
		if link.Attrs().Flags&net.FlagUp == 0 {
			t.Error("the link is down after its MAC changed")
		}
	})
}
