#!/usr/bin/env bash
# Guest agent (Go): vet, unit tests with the race detector, and a bounded fuzz run of the frame
# decoder (IMP_FUZZ_TIME, default 30s) on top of the committed seed corpus (guest/internal/proto/testdata/fuzz).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
cd "$IMP_ROOT/guest"
log "go vet"
go vet ./...
log "go test -race"
CGO_ENABLED=1 go test -race -count=1 ./...
log "fuzz FuzzDecode (${IMP_FUZZ_TIME:-30s})"
go test -run '^$' -fuzz '^FuzzDecode$' -fuzztime "${IMP_FUZZ_TIME:-30s}" ./internal/proto
