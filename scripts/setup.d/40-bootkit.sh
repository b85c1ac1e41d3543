#!/usr/bin/env bash
# The boot kit: everything a QEMU test VM needs, built from Debian packages and our own code and cached
# under $IMP_CACHE/bootkit/<key>/ (kernel, initramfs, test root filesystem), plus rust-vmm's
# vhost-device-vsock (the host half of Firecracker-style hybrid vsock under QEMU) built with cargo.
# $IMP_CACHE/bootkit/current.json names the kit the tests use. See docs/boot-kit.md.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
apt_need qemu-system-x86 qemu-utils busybox-static e2fsprogs cpio kmod gzip xz-utils zstd
bash "$IMP_ROOT/scripts/bootkit/build.sh"
