#!/usr/bin/env bash
# Per-VM supervisor (Go): vet, and unit tests with the race detector (they start real processes and,
# as root, create a real memory cgroup).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
cd "$IMP_ROOT/supervisor"
log "supervisor: go vet"
go vet ./...
log "supervisor: go test -race"
CGO_ENABLED=1 go test -race -count=1 ./...
