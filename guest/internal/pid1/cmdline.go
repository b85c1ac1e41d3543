// Package pid1 does what only the init process does: early mounts, the overlay root, and the
// final sync/unmount/power-off. It is skipped entirely when the agent runs as an ordinary process.
package pid1

import "strings"

// Cmdline holds the kernel parameters the agent reads.
type Cmdline struct {
	// Scratch is the block device holding the host-made ext4 scratch filesystem ("" = no overlay).
	Scratch string
	// Params are all key=value parameters, last one wins.
	Params map[string]string
}

// ParseCmdline parses /proc/cmdline text. Quoted values ("a b") are kept whole. Pure.
func ParseCmdline(text string) Cmdline {
	c := Cmdline{Params: map[string]string{}}
	for _, field := range splitCmdline(text) {
		key, value, ok := strings.Cut(field, "=")
		if !ok {
			c.Params[field] = ""
			continue
		}
		c.Params[key] = strings.Trim(value, `"`)
	}
	c.Scratch = c.Params["imp.scratch"]
	return c
}

func splitCmdline(text string) []string {
	var fields []string
	var cur strings.Builder
	quoted := false
	for _, r := range strings.TrimSpace(text) {
		switch {
		case r == '"':
			quoted = !quoted
			cur.WriteRune(r)
		case (r == ' ' || r == '\n' || r == '\t') && !quoted:
			if cur.Len() > 0 {
				fields = append(fields, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		fields = append(fields, cur.String())
	}
	return fields
}
