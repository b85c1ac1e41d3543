#!/usr/bin/env bash
# Builds (or finds in the cache) the boot kit and writes $IMP_CACHE/bootkit/current.json for the tests.
#   $IMP_CACHE/bootkit/kernels/<pkg>_<version>/   Debian cloud kernel, extracted, with modules.dep
#   $IMP_CACHE/bootkit/<key>/                     vmlinuz, initrd.cpio.gz, rootfs.ext4
#   $IMP_CACHE/vhost-device-vsock-<version>/bin/  rust-vmm's vhost-user vsock backend
# <key> = kernel release + a hash of every input (these scripts, busybox, the guest agent binary), so
# a changed input makes a new kit and an unchanged one is reused. Idempotent.
# Env: IMP_GUEST_BIN (default $IMP_CACHE/guest/imp-guest, built by scripts/setup.d/30-guest.sh).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
here="$IMP_ROOT/scripts/bootkit"
VHOST_DEVICE_VSOCK_VERSION="${VHOST_DEVICE_VSOCK_VERSION:-0.3.0}"
guest="${IMP_GUEST_BIN:-$IMP_CACHE/guest/imp-guest}"
kits="$IMP_CACHE/bootkit"
mkdir -p "$kits/kernels"
# One build at a time (setup and a developer's manual run may overlap).
exec 9>"$kits/.lock"
flock 9

# --- vhost-device-vsock (optional: without it the tests use virtio-serial; the reason is recorded) ---
vdv_root="$IMP_CACHE/vhost-device-vsock-$VHOST_DEVICE_VSOCK_VERSION"
vdv_bin="$vdv_root/bin/vhost-device-vsock"
vdv_error=""
if [[ ! -x "$vdv_bin" ]]; then
  cargo="$(command -v cargo || true)"
  [[ -z "$cargo" && -x "$HOME/.cargo/bin/cargo" ]] && cargo="$HOME/.cargo/bin/cargo"
  if [[ -z "$cargo" ]]; then
    vdv_error="cargo is not installed; vsock under QEMU needs vhost-device-vsock built from crates"
  else
    log "cargo install vhost-device-vsock $VHOST_DEVICE_VSOCK_VERSION (several minutes on 2 cores)"
    start=$SECONDS
    if "$cargo" install --locked --quiet vhost-device-vsock --version "$VHOST_DEVICE_VSOCK_VERSION" \
      --root "$vdv_root" >"$IMP_CACHE/vhost-device-vsock-build.log" 2>&1; then
      echo "$((SECONDS - start))" >"$vdv_root/build-seconds"
      log "built vhost-device-vsock in $((SECONDS - start)) s"
    else
      vdv_error="cargo install vhost-device-vsock failed: $(tail -n 3 "$IMP_CACHE/vhost-device-vsock-build.log" | tr '\n' ' ')"
    fi
  fi
  [[ -n "$vdv_error" ]] && log "WARNING: $vdv_error (QEMU tests fall back to virtio-serial)"
fi
[[ -x "$vdv_bin" ]] || vdv_bin=""

# --- kernel ---
kdir="$(bash "$here/fetch-kernel.sh" "$kits/kernels")"
release="$(cat "$kdir/release")"

# --- initramfs + test rootfs, keyed by their inputs ---
[[ -x "$guest" ]] || {
  echo "Cannot build the boot kit: guest agent $guest is missing (run scripts/setup.d/30-guest.sh first)" >&2
  exit 1
}
guest_sha="$(sha256sum "$guest" | cut -d' ' -f1)"
key_input="$(
  cat "$here"/*.sh
  sha256sum /bin/busybox
  echo "$kdir $guest_sha"
)"
key="$release-$(printf '%s' "$key_input" | sha256sum | cut -c1-12)"
kit="$kits/$key"
if [[ ! -f "$kit/.complete" ]]; then
  log "building boot kit $key"
  rm -rf "$kit.tmp" && mkdir -p "$kit.tmp"
  cp "$kdir/root/boot/vmlinuz-$release" "$kit.tmp/vmlinuz"
  bash "$here/build-initramfs.sh" "$kdir/root" "$release" "$kit.tmp/initrd.cpio.gz"
  bash "$here/build-rootfs.sh" "$guest" "$kit.tmp/rootfs.ext4"
  touch "$kit.tmp/.complete"
  rm -rf "$kit" && mv "$kit.tmp" "$kit"
fi

# --- manifest for the tests and the benchmark (absolute paths; regenerated every run) ---
json_str() { if [[ -z "$1" ]]; then printf 'null'; else printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; fi; }
cat >"$kits/current.json.tmp" <<JSON
{
  "key": $(json_str "$key"),
  "kernel": $(json_str "$kit/vmlinuz"),
  "initrd": $(json_str "$kit/initrd.cpio.gz"),
  "rootfs": $(json_str "$kit/rootfs.ext4"),
  "kernelRelease": $(json_str "$release"),
  "kernelPackage": $(json_str "$(basename "$kdir")"),
  "kernelDir": $(json_str "$kdir/root"),
  "guestInit": "/.imp/imp-guest",
  "guestSha256": $(json_str "$guest_sha"),
  "vhostDeviceVsock": $(json_str "$vdv_bin"),
  "vhostDeviceVsockError": $(json_str "$vdv_error")
}
JSON
mv "$kits/current.json.tmp" "$kits/current.json"

# Keep the three newest kits; older ones belong to guest binaries nobody runs any more.
ls -1dt "$kits"/*/.complete 2>/dev/null | sed 's#/.complete$##' | grep -v '/kernels$' | tail -n +4 | xargs -r rm -rf
log "boot kit: $kit"
