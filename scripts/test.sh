#!/usr/bin/env bash
# Runs every test the project has: lint, typecheck, the steps in scripts/test.d (Go tests, fuzzing),
# then all TypeScript tests (unit, integration against a real control plane, end-to-end with QEMU).
# Expects scripts/setup.sh to have run; `npm run ci` does both.
#
# To hunt load-sensitive failures, repeat chosen suites under a CPU load:
#   IMP_TEST_ONLY="test/e2e/**/*.test.ts test/fault/**/*.test.ts"  the files to run instead of all
#                                      (lint, typecheck and the Go steps are then skipped)
#   IMP_TEST_REPEAT=3                  run them that many times; the first failing round fails the run
#   IMP_TEST_CPU_LOAD=2                that many busy loops beside the tests, ended with the run
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$IMP_ROOT"
if [[ -z "${IMP_TEST_ONLY:-}" ]]; then
  log "lint"; npx eslint --max-warnings=0 .
  log "typecheck"; npx tsc --noEmit -p tsconfig.json
  for step in scripts/test.d/*.sh; do
    [[ -e "$step" ]] || continue
    log "test: $(basename "$step")"
    bash "$step"
  done
fi
load_pids=()
stop_load() { [[ ${#load_pids[@]} -eq 0 ]] || kill "${load_pids[@]}" 2>/dev/null || true; }
trap stop_load EXIT
for ((i = 0; i < ${IMP_TEST_CPU_LOAD:-0}; i++)); do
  ( while :; do :; done ) &
  load_pids+=($!)
done
[[ ${#load_pids[@]} -eq 0 ]] || log "CPU load: ${#load_pids[@]} busy loop(s) beside the tests"
read -r -a files <<<"${IMP_TEST_ONLY:-src/**/*.test.ts test/**/*.test.ts}"
rounds="${IMP_TEST_REPEAT:-1}"
# The fault suite records one result per case here; docs/failure-proof.md is generated from the run.
results="${IMP_FAULT_RESULTS_DIR:-$IMP_CACHE/fault-results}"
rc=0
for ((round = 1; round <= rounds; round++)); do
  rm -rf "$results"
  log "node tests ($(node --version))$([[ $rounds -eq 1 ]] || echo ", round $round of $rounds")"
  node --test --test-concurrency="${IMP_TEST_CONCURRENCY:-2}" --test-timeout=900000 \
    "${files[@]}" "$@" || { rc=$?; log "round $round failed"; break; }
done
if compgen -G "$results/*.json" >/dev/null; then
  log "docs/failure-proof.md from this run's fault cases"
  node scripts/gen-failure-proof.ts || rc=$((rc == 0 ? 1 : rc))
fi
exit "$rc"
