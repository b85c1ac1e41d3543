#!/usr/bin/env bash
# Root filesystems of the runner images the repo builds (images/<name>/packages.txt): Debian 12
# (bookworm) minbase plus those packages, then images/<name>/customize.sh if there is one (users,
# configuration), made by mmdebstrap from the machine's configured Debian mirror, packed as one gzip
# OCI layer with its digest and diff id, and the installed package versions beside it
# (packages.lock). Built once per machine and key (suite, package list, customize script,
# mmdebstrap version, this script) into the machine-wide build cache, in parallel;
# $IMP_CACHE/rootfs/<name> points at it.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
apt_need mmdebstrap pigz
SUITE=bookworm
self="$(sha256sum "$0" | cut -c1-16)"

build_rootfs() {
  local name="$1" list="$IMP_ROOT/images/$1/packages.txt"
  local packages key dir customize="$IMP_ROOT/images/$1/customize.sh"
  packages="$(grep -v '^\s*#' "$list" | grep -v '^\s*$' | sort -u | paste -sd, -)"
  key="$(printf '%s\n' "$SUITE" "$packages" "$(mmdebstrap --version)" "$self" "$(cat "$customize" 2>/dev/null)" | sha256sum | cut -c1-16)"
  dir="$IMP_BUILD_CACHE/rootfs-$name-$key"
  build_once "$dir" layer.tar.gz -- bash -c '
    set -euo pipefail
    dir="$1"; suite="$2"; packages="$3"; customize="$4"; tmp="$dir/.build"
    rm -rf "$tmp" && mkdir -p "$tmp"
    hook=()
    [[ -f "$customize" ]] && hook=(--customize-hook="sh $customize \"\$1\"")
    # man1 kept as an empty directory: with man pages excluded, update-alternatives in the JDK'"'"'s
    # postinst cannot link its man page slaves and the install fails.
    mmdebstrap --quiet --variant=minbase --include="$packages" --format=tar "${hook[@]}" \
      --essential-hook='"'"'mkdir -p "$1/usr/share/man/man1"'"'"' \
      --dpkgopt="path-exclude=/usr/share/doc/*" --dpkgopt="path-exclude=/usr/share/man/*" --dpkgopt="path-exclude=/usr/share/locale/*" \
      "$suite" "$tmp/rootfs.tar"
    tar -xOf "$tmp/rootfs.tar" ./var/lib/dpkg/status | awk "/^Package:/ {p=\$2} /^Version:/ {print p, \$2}" | sort > "$tmp/packages.lock"
    sha256sum "$tmp/rootfs.tar" | cut -d" " -f1 > "$tmp/layer.diffid"
    pigz -n -6 < "$tmp/rootfs.tar" > "$tmp/layer.tar.gz"
    sha256sum "$tmp/layer.tar.gz" | cut -d" " -f1 > "$tmp/layer.digest"
    mv "$tmp/layer.diffid" "$tmp/layer.digest" "$tmp/packages.lock" "$dir/"
    mv "$tmp/layer.tar.gz" "$dir/layer.tar.gz"
    rm -rf "$tmp"
  ' _ "$dir" "$SUITE" "$packages" "$customize"
  mkdir -p "$IMP_CACHE/rootfs"
  ln -sfn "$dir" "$IMP_CACHE/rootfs/$name"
}

pids=()
for d in "$IMP_ROOT"/images/*/; do
  [[ -f "$d/packages.txt" ]] || continue
  build_rootfs "$(basename "$d")" & pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit "$rc"
