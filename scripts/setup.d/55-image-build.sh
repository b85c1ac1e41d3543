#!/usr/bin/env bash
# Tools of the image build side: e2fsprogs (mkfs.ext4 -d, debugfs, filefrag, e2fsck), util-linux (flock),
# and for the tests/benchmark the reference pipeline umoci + skopeo (the registry comes from 50-registry.sh).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
apt_need e2fsprogs util-linux umoci skopeo
# mkfs.ext4 -d with hard links and xattrs needs e2fsprogs >= 1.43; Debian 12 ships 1.47.
mkfs.ext4 -V 2>&1 | sed -n 1p >&2  # sed reads to the end: `head` would SIGPIPE mkfs under pipefail
