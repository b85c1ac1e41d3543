#!/usr/bin/env bash
# The README's demo command: set up a fresh machine, then run the demo (scripts/demo.ts).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
bash "$IMP_ROOT/scripts/setup.sh"
cd "$IMP_ROOT"
exec node scripts/demo.ts "$@"
