#!/usr/bin/env bash
# Records the README demo (scripts/demo.ts) from a real run as an asciicast v2 file, by default
# docs/demo.cast; `--forge gitea` records the Gitea demo into docs/demo-gitea.cast. Debian's
# asciinema records a command non-interactively in a pseudo-terminal of its own, so this works over
# ssh and in CI. Run scripts/setup.sh (or `npm run demo`) once before.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$IMP_ROOT"
forge=github
if [[ "${1:-}" == "--forge" ]]; then forge="${2:?--forge github|gitea}"; shift 2; fi
default_out=docs/demo.cast
[[ "$forge" == gitea ]] && default_out=docs/demo-gitea.cast
out="${1:-$default_out}"
apt_need asciinema
tmp="$(mktemp --suffix .cast)"
trap 'rm -f "$tmp"' EXIT
log "recording the demo into $out"
IMP_DEMO_COLOR=1 asciinema rec --quiet --overwrite --title "Imp: CI jobs in microVMs ($forge, real run)" \
  --command "node scripts/demo.ts --forge $forge" "$tmp"
# The cast is the terminal's bytes; a failed demo is not evidence, so keep only a recording that passed.
if ! grep -q 'stopped everything the demo started: no namespace' "$tmp" || grep -q 'demo FAILED' "$tmp"; then
  echo "record-demo: the demo did not pass; $out left unchanged" >&2
  exit 1
fi
mv -f "$tmp" "$out"
trap - EXIT
log "wrote $out ($(wc -c <"$out") bytes); play it with: asciinema play $out"
