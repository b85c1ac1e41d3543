#!/usr/bin/env bash
# The chart's alert rules (deploy/helm/imp/files/alerts.yaml): linted by promtool, and its unit tests
# (test/prometheus/alerts.test.yaml: series in, alerts out) run by promtool (scripts/setup.d/66-prometheus.sh).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
promtool="$IMP_CACHE/bin/promtool"
[[ -x "$promtool" ]] || { echo "alert rules: no promtool at $promtool (scripts/setup.d/66-prometheus.sh builds it)" >&2; exit 1; }
log "alert rules: promtool check rules"
"$promtool" check rules "$IMP_ROOT/deploy/helm/imp/files/alerts.yaml"
log "alert rules: promtool test rules"
"$promtool" test rules "$IMP_ROOT/test/prometheus/alerts.test.yaml"
