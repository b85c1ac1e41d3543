#!/usr/bin/env bash
# Go programs the tests run beside Imp: test/github/scaleset-conformance, the real client and
# listener of github.com/actions/scaleset (pinned in its go.mod) driving the GitHub test server.
# Rebuilt only when its sources or the Go version change.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
src="$IMP_ROOT/test/github/scaleset-conformance"
key="$(cd "$src" && { go version; cat go.mod go.sum main.go; } | sha256sum | cut -c1-32)"
out="$IMP_CACHE/test-tools/$key"
build_once "$out" scaleset-conformance -- bash -c "cd '$src' && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -o '$out/scaleset-conformance' ."
mkdir -p "$IMP_CACHE/bin"
ln -sfn "$out/scaleset-conformance" "$IMP_CACHE/bin/scaleset-conformance"
