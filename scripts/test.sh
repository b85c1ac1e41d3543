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
exec node --test --test-concurrency="${IMP_TEST_CONCURRENCY:-2}" --test-timeout=600000 \
  "src/**/*.test.ts" "test/**/*.test.ts" "$@"
