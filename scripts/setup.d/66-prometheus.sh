#!/usr/bin/env bash
# Prometheus and promtool from github.com/prometheus/prometheus: the real Prometheus that scrapes Imp
# in test/e2e/real-node.test.ts, and promtool for the chart's alert rules
# (scripts/test.d/30-alert-rules.sh). Built from the Go module proxy into the machine-wide build
# cache, keyed by Prometheus's and Go's versions (~8 min of both cores cold, at nice 10; the web UI's
# assets are not built: the tests use the HTTP API). The module's go.work names directories its
# module zip leaves out, hence GOWORK=off.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"
dir="$IMP_BUILD_CACHE/prometheus-$PROMETHEUS_VERSION-$(go env GOVERSION)"
build() {
  local program
  for program in promtool prometheus; do
    GOWORK=off nice -n 10 "$IMP_ROOT/scripts/build/go-module.sh" github.com/prometheus/prometheus "$PROMETHEUS_VERSION" "./cmd/$program" "$dir/$program"
  done
}
build_once "$dir" promtool prometheus -- build
mkdir -p "$IMP_CACHE/bin"
ln -sfn "$dir/promtool" "$IMP_CACHE/bin/promtool"
ln -sfn "$dir/prometheus" "$IMP_CACHE/bin/prometheus"
log "prometheus and promtool of github.com/prometheus/prometheus $PROMETHEUS_VERSION in $dir"
