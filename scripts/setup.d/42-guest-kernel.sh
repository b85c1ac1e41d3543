#!/usr/bin/env bash
# Imp's own guest kernel (the one Firecracker can boot; QEMU microvm boots it too), built from
# Debian's linux-source with scripts/bootkit/kernel/imp.config merged onto tinyconfig, checked by
# scripts/bootkit/check-kernel-config.sh and cached under $IMP_CACHE/guest-kernel/<key>/ (docs/kernel.md).
# Idempotent: a cached kernel with the same key is reused and nothing is built.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
# linux-source-6.1 by name, not the `linux-source` metapackage: its version moves with the suite.
apt_need linux-source-6.1 build-essential flex bison bc libelf-dev libssl-dev xz-utils lz4
bash "$IMP_ROOT/scripts/bootkit/kernel/build.sh"
