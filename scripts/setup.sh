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
for step in scripts/setup.d/*.sh; do
  log "setup: $(basename "$step")"
  bash "$step"
done
