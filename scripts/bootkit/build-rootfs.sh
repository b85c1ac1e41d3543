#!/usr/bin/env bash
# build-rootfs.sh GUEST_AGENT OUT.ext4 [SIZE_MIB]
# Builds a test root filesystem image without a loop mount (`mkfs.ext4 -d`): busybox-static with its
# applets as /bin symlinks, the guest agent at /.imp/imp-guest, and the empty directories the guest
# agent mounts over. The base image is mounted read-only by every VM; writes go to the scratch disk
# through the guest agent's overlay. Label: imp-root.
set -euo pipefail
guest="$1" out="$2" size_mib="${3:-64}"
[[ -x "$guest" ]] || { echo "Cannot build rootfs: guest agent $guest is not an executable file" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
root="$work/root"
# /.imp/oldroot and /.imp/scratch are where the guest agent parks the old root and the scratch mount
# when it pivots into its overlay (docs/guest-protocol.md, "Guest boot").
mkdir -p "$root"/{bin,sbin,dev,proc,sys,run,tmp,mnt,root,etc,var/tmp,home,.imp/oldroot,.imp/scratch}
cp /bin/busybox "$root/bin/busybox"
for applet in $(/bin/busybox --list); do
  [[ "$applet" == busybox ]] || ln -s busybox "$root/bin/$applet"
done
ln -s ../bin/busybox "$root/sbin/init"
install -m 0755 "$guest" "$root/.imp/imp-guest"
chmod 1777 "$root/tmp" "$root/var/tmp"
chmod 0700 "$root/root"
cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
cat >"$root/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
EOF
echo imp >"$root/etc/hostname"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"

rm -f "$out.tmp"
truncate -s "${size_mib}M" "$out.tmp"
# -E root_owner: files owned by root regardless of who builds; no lazy init so the image is complete
# and never written to by the kernel on first mount.
mkfs.ext4 -q -F -L imp-root -d "$root" -E root_owner=0:0,lazy_itable_init=0,lazy_journal_init=0 \
  "$out.tmp"
mv "$out.tmp" "$out"
