#!/usr/bin/env bash
# Runs every test the project has: lint, typecheck, the steps in scripts/test.d (Go tests, fuzzing),
# then all TypeScript tests (unit, integration against a real control plane, end-to-end with QEMU).
# Expects scripts/setup.sh to have run; `npm run ci` does both.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$IMP_ROOT"
log "lint"; npx eslint --max-warnings=0 .
log "typecheck"; npx tsc --noEmit -p tsconfig.json
for step in scripts/test.d/*.sh; do
  [[ -e "$step" ]] || continue
  log "test: $(basename "$step")"
  bash "$step"
done
log "node tests ($(node --version))"
# The fault suite records one result per case here; docs/failure-proof.md is generated from the run.
results="${IMP_FAULT_RESULTS_DIR:-$IMP_CACHE/fault-results}"
rm -rf "$results"
rc=0
node --test --test-concurrency="${IMP_TEST_CONCURRENCY:-2}" --test-timeout=900000 \
  "src/**/*.test.ts" "test/**/*.test.ts" "$@" || rc=$?
if compgen -G "$results/*.json" >/dev/null; then
  log "docs/failure-proof.md from this run's fault cases"
  node scripts/gen-failure-proof.ts || rc=$((rc == 0 ? 1 : rc))
fi
exit "$rc"
