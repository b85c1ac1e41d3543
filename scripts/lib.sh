# Shared helpers for the project's shell scripts. Sourced, not run.
IMP_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export IMP_ROOT
export IMP_CACHE="${IMP_CACHE:-$IMP_ROOT/.cache}"
# Builds of pinned third-party versions (Gitea, its runner, the kubelet, Helm) are the same for every
# checkout: like Go's own build cache, they live once per machine, keyed by what went into them.
export IMP_BUILD_CACHE="${IMP_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/imp-builds}"
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
  # Set-up steps run in parallel and dpkg takes one installer at a time: queue on a machine-wide
  # lock rather than fail on dpkg's.
  mkdir -p "$IMP_BUILD_CACHE" "$IMP_CACHE"
  (
    flock 9
    log "apt-get install ${missing[*]}"
    if [[ ! -f "$IMP_CACHE/.apt-updated" ]]; then
      apt-get update -qq >/dev/null
      touch "$IMP_CACHE/.apt-updated"
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      -o DPkg::Lock::Timeout=600 "${missing[@]}" >/dev/null
  ) 9>"$IMP_BUILD_CACHE/.apt.lock"
}

# build_once KEY_DIR OUTPUT... -- COMMAND...: runs COMMAND unless every OUTPUT exists in KEY_DIR
# (the cache entry for one set of inputs), under a lock so concurrent set-ups build it once. Prints
# the time it took.
build_once() {
  local dir="$1"; shift
  local binaries=()
  while [[ "$1" != "--" ]]; do binaries+=("$1"); shift; done
  shift
  mkdir -p "$dir"
  exec {lockfd}>"$dir/.lock"
  flock "$lockfd"
  local missing=0 b
  # Present and not empty: outputs are moved into place last, so a file there is a finished one
  # (not -x: a root filesystem layer is an output too, and is not executable).
  for b in "${binaries[@]}"; do [[ -s "$dir/$b" ]] || missing=1; done
  if [[ $missing -eq 1 ]]; then
    local start=$SECONDS
    "$@"
    log "built ${binaries[*]} in $((SECONDS - start)) s ($dir)"
  fi
  exec {lockfd}>&-
}
