#!/usr/bin/env bash
# Builds the guest agent (guest/, Go) into $IMP_CACHE/guest/imp-guest, and the test runner program
# the end-to-end runner image carries (guest/cmd/imp-test-runner) beside it: static (CGO_ENABLED=0),
# stripped, reproducible paths. Rebuilt only when the sources or the Go version change (the key is
# a hash of every non-test file under guest/ plus `go version`).
# Prints nothing on a cache hit except the path; other steps and tests read IMP_GUEST_BIN or this path.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
command -v go >/dev/null || { echo "Cannot build the guest agent: no Go toolchain on PATH" >&2; exit 1; }
out="$IMP_CACHE/guest"
bin="$out/imp-guest"
key="$(
  cd "$IMP_ROOT/guest"
  { go version; find . -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) ! -name '*_test.go' ! -path './testdata/*' -print0 \
      | LC_ALL=C sort -z | xargs -0 sha256sum; } | sha256sum | cut -c1-32
)"
runner="$out/imp-test-runner"
if [[ -x "$bin" && -x "$runner" && "$(cat "$out/imp-guest.key" 2>/dev/null)" == "$key" ]]; then
  echo "$bin"
  exit 0
fi
log "building guest agent ($key)"
mkdir -p "$out"
tmp="$(mktemp "$out/.imp-guest.XXXXXX")"
(cd "$IMP_ROOT/guest" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp" ./cmd/imp-guest)
chmod 0755 "$tmp"
mv -f "$tmp" "$bin"
tmp="$(mktemp "$out/.imp-test-runner.XXXXXX")"
(cd "$IMP_ROOT/guest" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp" ./cmd/imp-test-runner)
chmod 0755 "$tmp"
mv -f "$tmp" "$runner"
echo "$key" >"$out/imp-guest.key"
sha256sum "$bin" | cut -d' ' -f1 >"$out/imp-guest.sha256"
echo "$bin"
