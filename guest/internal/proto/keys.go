package proto

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
)

// checkKeys rejects objects with duplicate keys. encoding/json matches struct fields
// case-insensitively and lets the last key win, while the host's JSON.parse is exact: {"id":1,"ID":2}
// would mean different things on the two sides. So within one object no two keys may be equal
// ignoring case, except inside the top-level "env" object whose keys are case-sensitive data
// (there only exact duplicates are rejected). body must already be valid JSON.
func checkKeys(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	type frame struct {
		isObject bool
		exact    bool // keys compared exactly (env), not folded
		keys     map[string]struct{}
		wantKey  bool
		lastKey  string
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				f := &frame{isObject: t == '{', keys: map[string]struct{}{}, wantKey: t == '{'}
				f.exact = t == '{' && len(stack) == 1 && strings.EqualFold(top.lastKey, "env")
				stack = append(stack, f)
				continue
			case '}', ']':
				stack = stack[:len(stack)-1]
			}
		case string:
			if top != nil && top.isObject && top.wantKey {
				k := t
				if !top.exact {
					k = strings.ToLower(t)
				}
				if _, dup := top.keys[k]; dup {
					return errors.New("duplicate key " + truncate(t, 64))
				}
				top.keys[k] = struct{}{}
				top.lastKey = t
				top.wantKey = false
				continue
			}
		}
		// A value was completed: the enclosing object expects a key next.
		if len(stack) > 0 && stack[len(stack)-1].isObject {
			stack[len(stack)-1].wantKey = true
		}
	}
}
