#!/usr/bin/env bash
# Installs everything the project needs on a machine that has never seen it (Debian 12, as root):
# Debian packages, the pinned Node.js and npm packages, and the test binaries built from source.
# Idempotent: every step checks its own cache first. Steps live in scripts/setup.d, run in order.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$IMP_ROOT"
rm -f "$IMP_CACHE/.apt-updated"
# Preflight: the toolchains the setup builds with. Go (>= 1.26; an older go fetches the newer
# toolchain from the Go module proxy by itself) is required; cargo is optional: without it the QEMU
# tests reach the guest over virtio-serial instead of vhost-user vsock (docs/boot-kit.md).
[[ $EUID -eq 0 ]] || { echo "setup: run as root (it installs Debian packages)" >&2; exit 1; }
command -v apt-get >/dev/null || { echo "setup: needs a Debian system (apt-get not found)" >&2; exit 1; }
command -v go >/dev/null || { echo "setup: Cannot build the test binaries: no Go toolchain on PATH (need Go >= 1.26)" >&2; exit 1; }
command -v cargo >/dev/null || [[ -x "$HOME/.cargo/bin/cargo" ]] || log "setup: cargo not found; vsock tests will use virtio-serial"
# The npm packages and the guest agent come first (the boot kit's root filesystem carries the agent);
# every other step is independent of the rest and runs in parallel, each logging to
# $IMP_CACHE/setup-logs/<step>.log: the long builds (control plane, guest kernel, Gitea, Helm, the
# runner root filesystems) overlap their downloads, linking and waits instead of queuing.
first=(10-npm.sh 30-guest.sh)
start=$SECONDS
for name in "${first[@]}"; do
  log "setup: $name"
  bash "scripts/setup.d/$name"
done
logs="$IMP_CACHE/setup-logs"
rm -rf "$logs" && mkdir -p "$logs"
declare -A pid_of=()
for step in scripts/setup.d/*.sh; do
  name="$(basename "$step")"
  [[ " ${first[*]} " == *" $name "* ]] && continue
  (
    at=$SECONDS
    bash "$step" >"$logs/$name.log" 2>&1
    echo "$((SECONDS - at))" >"$logs/$name.seconds"
  ) &
  pid_of[$name]=$!
done
log "setup: ${!pid_of[*]} in parallel (logs: $logs)"
failed=()
for name in $(printf '%s\n' "${!pid_of[@]}" | sort); do
  if wait "${pid_of[$name]}"; then
    log "setup: $name done in $(cat "$logs/$name.seconds") s"
  else
    failed+=("$name")
  fi
done
for name in "${failed[@]}"; do
  log "setup: $name FAILED; the end of $logs/$name.log:"
  tail -n 40 "$logs/$name.log" >&2
done
[[ ${#failed[@]} -eq 0 ]] || { echo "setup: ${#failed[@]} step(s) failed: ${failed[*]}" >&2; exit 1; }
log "setup: done in $((SECONDS - start)) s"
