#!/usr/bin/env bash
# Installs everything the project needs on a machine that has never seen it (Debian 12, as root):
# Debian packages, the pinned Node.js and npm packages, and the test binaries built from source.
# Idempotent: every step checks its own cache first. Steps live in scripts/setup.d, run in order.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$IMP_ROOT"
rm -f "$IMP_CACHE/.apt-updated"
for step in scripts/setup.d/*.sh; do
  log "setup: $(basename "$step")"
  bash "$step"
done
