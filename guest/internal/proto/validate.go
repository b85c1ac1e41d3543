package proto

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// Limits of request fields (docs/guest-protocol.md).
const (
	// MinUnixTimeMs and MaxUnixTimeMs bound configure's unixTimeMs: 2020-01-01 and 2100-01-01.
	MinUnixTimeMs = 1577836800000
	MaxUnixTimeMs = 4102444800000
	MaxExecIDLen   = 128
	MaxArgs        = 4096
	MaxEnvKeys     = 4096
	MaxClientLen   = 128
	MaxHostnameLen = 64
	MinSeedBytes   = 16
	MaxSeedBytes   = 4096
	MaxDNSServers  = 3
	MaxVersions    = 16
	// ExitRecordKeyBytes is the length of the per-boot exit record key.
	ExitRecordKeyBytes = 32
	// MaxStdinBytes bounds an exec's stdin: what a pipe holds without a reader, so it is written at once.
	MaxStdinBytes = 64 * 1024
)

var (
	execIDPattern    = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)
	ifacePattern     = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,15}$`)
	hostLabelPattern = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)
)

// Signals a host may send, by name.
var SignalNames = []string{"SIGTERM", "SIGINT", "SIGKILL", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"}

func validate(req *Request) error {
	switch {
	case req.Hello != nil:
		return validateHello(req.Hello)
	case req.Configure != nil:
		return validateConfigure(req.Configure)
	case req.Exec != nil:
		return validateExec(req.Exec)
	case req.ExecStatus != nil:
		return ValidateExecID(req.ExecStatus.ExecID)
	case req.Signal != nil:
		if err := ValidateExecID(req.Signal.ExecID); err != nil {
			return err
		}
		for _, name := range SignalNames {
			if req.Signal.Signal == name {
				return nil
			}
		}
		return fmt.Errorf("signal must be one of %s", strings.Join(SignalNames, " "))
	case req.Shutdown != nil:
		if req.Shutdown.Mode != "poweroff" && req.Shutdown.Mode != "reboot" {
			return errors.New(`mode must be "poweroff" or "reboot"`)
		}
		return nil
	}
	return errors.New("empty request")
}

func validateHello(h *HelloRequest) error {
	if len(h.Versions) == 0 || len(h.Versions) > MaxVersions {
		return fmt.Errorf("versions must list 1..%d versions", MaxVersions)
	}
	if len(h.Client) > MaxClientLen {
		return fmt.Errorf("client must be at most %d bytes", MaxClientLen)
	}
	return nil
}

// ValidateExecID checks the execId syntax shared by all exec requests.
func ValidateExecID(id string) error {
	if !execIDPattern.MatchString(id) {
		return errors.New("execId must be 1..128 characters of [A-Za-z0-9._:-]")
	}
	return nil
}

func validateExec(e *ExecRequest) error {
	if err := ValidateExecID(e.ExecID); err != nil {
		return err
	}
	if len(e.Argv) == 0 || len(e.Argv) > MaxArgs {
		return fmt.Errorf("argv must have 1..%d entries", MaxArgs)
	}
	if e.Argv[0] == "" {
		return errors.New("argv[0] must not be empty")
	}
	for i, a := range e.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("argv[%d] must not contain NUL", i)
		}
	}
	if e.Env == nil {
		return errors.New("env is required (an object; may be empty)")
	}
	if len(e.Env) > MaxEnvKeys {
		return fmt.Errorf("env must have at most %d keys", MaxEnvKeys)
	}
	for k, v := range e.Env {
		// Never name the key's value; the key itself is not secret but keep messages short.
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return errors.New("env keys must be non-empty and contain no '=' or NUL")
		}
		if strings.IndexByte(v, 0) >= 0 {
			return errors.New("env values must not contain NUL")
		}
	}
	if e.Cwd != nil && !strings.HasPrefix(*e.Cwd, "/") {
		return errors.New("cwd must be an absolute path")
	}
	if e.Cwd != nil && strings.IndexByte(*e.Cwd, 0) >= 0 {
		return errors.New("cwd must not contain NUL")
	}
	if (e.UID == nil) != (e.GID == nil) {
		// One without the other would run the job with gid 0 (or uid 0): never guess.
		return errors.New("uid and gid must be given together (or neither, for root)")
	}
	if e.ShutdownAfterExit != nil && *e.ShutdownAfterExit != "poweroff" && *e.ShutdownAfterExit != "reboot" {
		return errors.New(`shutdownAfterExit must be "poweroff" or "reboot"`)
	}
	if e.Stdin != nil {
		data, err := base64.StdEncoding.Strict().DecodeString(*e.Stdin)
		if err != nil || len(data) > MaxStdinBytes {
			return fmt.Errorf("stdin must be standard padded base64 of at most %d bytes", MaxStdinBytes)
		}
		e.StdinBytes = data
	}
	return nil
}

func validateConfigure(c *ConfigureRequest) error {
	if c.Hostname != nil {
		if err := validateHostname(*c.Hostname); err != nil {
			return err
		}
	}
	if c.Network != nil {
		if err := validateNetwork(c.Network); err != nil {
			return err
		}
	}
	if c.EntropySeed != nil {
		seed, err := base64.StdEncoding.Strict().DecodeString(*c.EntropySeed)
		if err != nil {
			return errors.New("entropySeed must be standard padded base64")
		}
		if len(seed) < MinSeedBytes || len(seed) > MaxSeedBytes {
			return fmt.Errorf("entropySeed must decode to %d..%d bytes", MinSeedBytes, MaxSeedBytes)
		}
		c.Seed = seed
	}
	if c.UnixTimeMs != nil && (*c.UnixTimeMs < MinUnixTimeMs || *c.UnixTimeMs > MaxUnixTimeMs) {
		return errors.New("unixTimeMs must be a time between 2020 and 2100")
	}
	if c.ExitRecordKey != nil {
		key, err := base64.StdEncoding.Strict().DecodeString(*c.ExitRecordKey)
		if err != nil || len(key) != ExitRecordKeyBytes {
			return fmt.Errorf("exitRecordKey must be standard padded base64 of %d bytes", ExitRecordKeyBytes)
		}
		c.RecordKey = key
	}
	return nil
}

func validateHostname(h string) error {
	if len(h) == 0 || len(h) > MaxHostnameLen {
		return fmt.Errorf("hostname must be 1..%d characters", MaxHostnameLen)
	}
	for _, label := range strings.Split(h, ".") {
		if !hostLabelPattern.MatchString(label) {
			return errors.New("hostname must be dot-separated RFC 1123 labels")
		}
	}
	return nil
}

func validateNetwork(n *NetworkConfig) error {
	if !ifacePattern.MatchString(n.Interface) {
		return errors.New("network.interface must be 1..15 characters of [A-Za-z0-9_.-]")
	}
	if _, err := netip.ParsePrefix(n.Address); err != nil {
		return errors.New("network.address must be an IP address in CIDR notation")
	}
	if n.Gateway != "" {
		if _, err := netip.ParseAddr(n.Gateway); err != nil {
			return errors.New("network.gateway must be an IP address")
		}
	}
	if n.MAC != "" && !unicastMAC(n.MAC) {
		return errors.New("network.mac must be a unicast MAC address xx:xx:xx:xx:xx:xx")
	}
	if len(n.DNS) > MaxDNSServers {
		return fmt.Errorf("network.dns must list at most %d servers", MaxDNSServers)
	}
	for _, d := range n.DNS {
		if _, err := netip.ParseAddr(d); err != nil {
			return errors.New("network.dns entries must be IP addresses")
		}
	}
	return nil
}

var macPattern = regexp.MustCompile(`^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$`)

// unicastMAC: six colon-separated octets with the multicast bit of the first one clear.
func unicastMAC(mac string) bool {
	if !macPattern.MatchString(mac) {
		return false
	}
	first, err := strconv.ParseUint(mac[:2], 16, 8)
	return err == nil && first&1 == 0
}
