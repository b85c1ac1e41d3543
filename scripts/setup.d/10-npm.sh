#!/usr/bin/env bash
# npm packages, including the pinned Node.js runtime (package `node`).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
cd "$IMP_ROOT"
if [[ ! -x node_modules/.bin/node ]] || ! cmp -s package-lock.json node_modules/.package-lock.json.copy 2>/dev/null; then
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.package-lock.json.copy
fi
node --version
