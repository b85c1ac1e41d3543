// Package server is the supervisor's side of its Unix socket: newline-delimited JSON, every line at
// most MaxLine bytes in either direction. On connect the supervisor sends a hello with the status; a
// client may then ask for the status or send a signal; when the process exits every connection gets
// an exit event and is closed, so a client waiting on its connection learns of the exit at once.
package server

// MaxLine bounds one message (request or reply) including its newline.
const MaxLine = 4096

// MaxConns bounds concurrent connections; the agent needs one per process, a few more for tools.
const MaxConns = 16

// ProcessRef names a process for good: pid plus start time (clock ticks since boot, /proc/<pid>/stat field 22).
type ProcessRef struct {
	Pid       int    `json:"pid"`
	StartTime uint64 `json:"startTime"`
}

// Exit is how the supervised process ended, as recorded in exit.json.
type Exit struct {
	// Code is the exit status, or nil when a signal ended the process.
	Code *int `json:"code"`
	// Signal is the name of the terminating signal ("SIGKILL"), or nil.
	Signal *string `json:"signal"`
	// At is when the supervisor reaped the process (RFC 3339, UTC).
	At string `json:"at"`
	// Memory is what the process's memory cgroup saw, read as it exited; nil without a cgroup.
	Memory *MemoryUse `json:"memory,omitempty"`
	// FileBound says the supervisor killed the process because a file it writes passed its bound
	// (the VM's console log); nil otherwise.
	FileBound *FileBoundExceeded `json:"fileBound,omitempty"`
}

// FileBoundExceeded is the file that passed its bound, its size when the supervisor saw it, and the bound.
type FileBoundExceeded struct {
	Path     string `json:"path"`
	Bytes    int64  `json:"bytes"`
	MaxBytes int64  `json:"maxBytes"`
}

// MemoryUse is a memory cgroup's account of its process: whether the kernel's OOM killer ended
// something in it (the cgroup's limit was reached), and its peak and limit where the kernel says.
type MemoryUse struct {
	OOMKilled  bool  `json:"oomKilled"`
	PeakBytes  int64 `json:"peakBytes,omitempty"`
	LimitBytes int64 `json:"limitBytes,omitempty"`
}

// Status answers "status" and is part of hello and exit events.
type Status struct {
	Name       string     `json:"name"`
	VMID       string     `json:"vmId"`
	State      string     `json:"state"` // "running" or "exited"
	Process    ProcessRef `json:"process"`
	Supervisor ProcessRef `json:"supervisor"`
	StartedAt  string     `json:"startedAt"`
	Exit       *Exit      `json:"exit,omitempty"`
}

// Request is one client line. Id, when set, is echoed in the reply.
type Request struct {
	ID     *uint32 `json:"id,omitempty"`
	Op     string  `json:"op"` // "status" or "signal"
	Signal string  `json:"signal,omitempty"`
}

// Message is one supervisor line: an event ("hello", "exit") or a reply to a request ("reply").
type Message struct {
	Type   string  `json:"type"`
	ID     *uint32 `json:"id,omitempty"`
	OK     *bool   `json:"ok,omitempty"`
	Error  string  `json:"error,omitempty"`
	Status *Status `json:"status,omitempty"`
}
