#!/usr/bin/env bash
# build-initramfs.sh KERNEL_ROOT KERNEL_RELEASE OUT.cpio.gz
# Builds Imp's small initramfs: busybox-static, scripts/bootkit/initramfs-init.sh as /init, and the
# kernel modules a test VM needs that this kernel does not have built in, with their dependencies in
# load order. KERNEL_ROOT is an extracted kernel package (KERNEL_ROOT/lib/modules/KERNEL_RELEASE) on
# which `depmod -b` has run. Modules that are built in are skipped; compressed modules (.ko.xz,
# .ko.zst, .ko.gz) are stored decompressed because busybox insmod loads plain ELF only.
set -euo pipefail
kroot="$1" krel="$2" out="$3"
here="$(cd "$(dirname "$0")" && pwd)"

# What a test VM uses: virtio-mmio transport (QEMU microvm), root + scratch disks, virtio-serial
# console ports, vsock over virtio, overlayfs for the writable root, virtio-net for networking tests.
wanted=(virtio_mmio virtio_blk virtio_console vmw_vsock_virtio_transport overlay virtio_net)

# Debian's busybox-static installs its static binary as /bin/busybox.
busybox=/bin/busybox
[[ -x "$busybox" ]] || { echo "Cannot build initramfs: busybox-static is not installed" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"/{bin,dev,proc,sys,etc,newroot,lib/modules}
cp "$busybox" "$work/bin/busybox"
for applet in sh mount umount insmod mkdir cat findfs usleep switch_root; do
  ln -s busybox "$work/bin/$applet"
done
install -m 0755 "$here/initramfs-init.sh" "$work/init"

moddir="$kroot/lib/modules/$krel"
: >"$work/etc/imp-modules"
declare -A seen=()
for m in "${wanted[@]}"; do
  # kmod prints the closure deps-first as "insmod PATH [OPTIONS]" or "builtin NAME".
  deps="$(modprobe -d "$kroot" -S "$krel" --show-depends "$m")" || {
    echo "Cannot build initramfs: module $m is neither built into $krel nor a module of it" >&2
    exit 1
  }
  while read -r kind path _; do
    [[ "$kind" == insmod ]] || continue
    rel="${path#"$moddir"/}"
    [[ -n "${seen[$rel]:-}" ]] && continue
    seen[$rel]=1
    plain="${rel%.xz}" plain="${plain%.zst}" plain="${plain%.gz}"
    mkdir -p "$work/lib/modules/$(dirname "$plain")"
    case "$rel" in
      *.xz) xz -dc "$path" >"$work/lib/modules/$plain" ;;
      *.zst) zstd -qdc "$path" >"$work/lib/modules/$plain" ;;
      *.gz) gzip -dc "$path" >"$work/lib/modules/$plain" ;;
      *) cp "$path" "$work/lib/modules/$plain" ;;
    esac
    echo "$plain" >>"$work/etc/imp-modules"
  done <<<"$deps"
done

# The kernel's built-in initramfs already provides /dev/console; ours is unpacked over it.
(cd "$work" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) | gzip -9n >"$out.tmp"
mv "$out.tmp" "$out"
