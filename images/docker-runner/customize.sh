#!/bin/sh
# mmdebstrap --customize-hook for the Docker runner image: $1 is the image's root directory.
# The `runner` user as on GitHub's hosted runners (uid 1001, groups docker and sudo, passwordless
# sudo, home /home/runner), and dockerd's configuration.
set -eu
root="$1"
chroot "$root" useradd --uid 1001 --create-home --shell /bin/bash --groups docker,sudo runner
printf 'runner ALL=(ALL) NOPASSWD:ALL\n' >"$root/etc/sudoers.d/runner"
chmod 0440 "$root/etc/sudoers.d/runner"
mkdir -p "$root/etc/docker" "$root/var/lib/docker" "$root/var/lib/containerd"
# overlay2 named, so a storage on the wrong filesystem fails loudly instead of falling back to vfs
# (the guest agent mounts /var/lib/docker from the scratch disk's ext4).
printf '{\n  "storage-driver": "overlay2",\n  "log-driver": "local"\n}\n' >"$root/etc/docker/daemon.json"
