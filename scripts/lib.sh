# Shared helpers for the project's shell scripts. Sourced, not run.
IMP_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export IMP_ROOT
export IMP_CACHE="${IMP_CACHE:-$IMP_ROOT/.cache}"
# The project pins its own Node.js (the `node` npm package, see docs/adr/0001-node-runtime.md);
# scripts put node_modules/.bin first so every `node` below is that one.
export PATH="$IMP_ROOT/node_modules/.bin:$PATH"

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

# apt_need PKG... installs the Debian packages that are missing, running `apt-get update` at most once.
apt_need() {
  local missing=()
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  log "apt-get install ${missing[*]}"
  if [[ ! -f "$IMP_CACHE/.apt-updated" ]]; then
    apt-get update -qq >/dev/null
    mkdir -p "$IMP_CACHE" && touch "$IMP_CACHE/.apt-updated"
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
