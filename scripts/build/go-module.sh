#!/usr/bin/env bash
# Builds one program of a Go module at an exact version, from the Go module proxy, into OUT:
#   go-module.sh MODULE VERSION PACKAGE OUT [LDFLAGS]
# `go install MODULE@VERSION` cannot build these (Gitea's go.mod declares another module path and
# has replace directives; the runner's version list is refused by the proxy), so the exact version
# is downloaded (`go mod download`), copied out of the read-only module cache, and built inside as
# the main module, static (CGO_ENABLED=0) and reproducible (-trimpath). OUT appears atomically.
set -euo pipefail
module="$1" version="$2" package="$3" out="$4" ldflags="${5:-}"
dir="$(go mod download -json "$module@$version" | sed -n 's/^\s*"Dir": "\(.*\)",\?$/\1/p')"
[[ -n "$dir" && -d "$dir" ]] || { echo "Cannot build $module@$version: go mod download gave no directory" >&2; exit 1; }
work="$(mktemp -d "${TMPDIR:-/tmp}/imp-build-$(basename "$out").XXXXXX")"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
cp -r "$dir/." "$work/src"
chmod -R u+w "$work/src"
mkdir -p "$(dirname "$out")"
(cd "$work/src" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath -ldflags "-s -w $ldflags" -o "$out.tmp" "$package")
mv -f "$out.tmp" "$out"
