// Package system applies host `configure` requests to the machine: hostname, network, resolv.conf
// and entropy. Linux is the VM; Dry is for running the agent as an ordinary process.
package system

import (
	"context"
	"log/slog"
	"sync"

	"imp.dev/guest/internal/proto"
)

// Dry validates nothing beyond the protocol and changes nothing; it remembers the last request so
// tests can see what would have been applied.
type Dry struct {
	mu   sync.Mutex
	last *proto.ConfigureRequest
	log  *slog.Logger
}

func NewDry(log *slog.Logger) *Dry { return &Dry{log: log} }

func (d *Dry) Configure(_ context.Context, req *proto.ConfigureRequest) error {
	d.mu.Lock()
	d.last = req
	d.mu.Unlock()
	d.log.Info("configure (dry run, nothing applied)", "hostname", req.Hostname != nil, "network", req.Network != nil, "seedBytes", len(req.Seed))
	return nil
}

// Last is the last configure request seen, or nil.
func (d *Dry) Last() *proto.ConfigureRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last
}
