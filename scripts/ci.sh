#!/usr/bin/env bash
# The README's test command: set up a fresh machine, then run all tests.
set -euo pipefail
here="$(dirname "$0")"
bash "$here/setup.sh"
bash "$here/test.sh" "$@"
