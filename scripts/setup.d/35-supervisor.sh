#!/usr/bin/env bash
# Builds the per-VM supervisor (supervisor/, Go) into $IMP_CACHE/supervisor/imp-supervisor: static
# (CGO_ENABLED=0), stripped, reproducible paths. Rebuilt only when the sources or the Go version change
# (the key is a hash of every non-test file under supervisor/ plus `go version`).
# Prints the path; tests and the agent read IMP_SUPERVISOR_BIN or this path.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
command -v go >/dev/null || { echo "Cannot build the supervisor: no Go toolchain on PATH" >&2; exit 1; }
out="$IMP_CACHE/supervisor"
bin="$out/imp-supervisor"
key="$(
  cd "$IMP_ROOT/supervisor"
  { go version; find . -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) ! -name '*_test.go' -print0 \
      | LC_ALL=C sort -z | xargs -0 sha256sum; } | sha256sum | cut -c1-32
)"
if [[ -x "$bin" && "$(cat "$out/imp-supervisor.key" 2>/dev/null)" == "$key" ]]; then
  echo "$bin"
  exit 0
fi
log "building supervisor ($key)"
mkdir -p "$out"
tmp="$(mktemp "$out/.imp-supervisor.XXXXXX")"
(cd "$IMP_ROOT/supervisor" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp" ./cmd/imp-supervisor)
chmod 0755 "$tmp"
mv -f "$tmp" "$bin"
echo "$key" >"$out/imp-supervisor.key"
echo "$bin"
