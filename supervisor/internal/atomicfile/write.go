// Package atomicfile writes small state files so that a reader (or a crash) only ever sees the old
// content or the whole new content: write a temporary file in the same directory, fsync it, rename it
// over the target, fsync the directory so the rename itself survives a power loss.
package atomicfile

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// WriteJSON writes v as one JSON document followed by a newline to path, atomically.
func WriteJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return Write(path, append(b, '\n'))
}

// Write replaces path with data atomically (mode 0600).
func Write(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		_ = tmp.Close()
		return err
	}
	if err = tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
