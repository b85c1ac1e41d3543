#!/usr/bin/env bash
# Builds (or finds in the cache) Imp's own guest kernel: Debian's `linux-source` tree configured as
# `make tinyconfig` + imp.config (merged with scripts/kconfig/merge_config.sh), everything built in,
# no modules, no initramfs. Firecracker boots its vmlinux; QEMU microvm boots its bzImage.
#   $IMP_BUILD_CACHE/guest-kernel/<key>/{vmlinux,bzImage,config,build.log,manifest.json}
#   $IMP_CACHE/guest-kernel/current.json   a copy of this checkout's manifest, for tests and benchmarks
# The kernels live in the machine-wide build cache: every checkout with the same inputs shares one.
# <key> = linux-source version + sha256 over imp.config and this script, so editing either rebuilds.
# The resulting .config must pass scripts/bootkit/check-kernel-config.sh, and every line of imp.config
# must be in it unchanged; otherwise the build fails. See docs/kernel.md.
# Needs: linux-source, build-essential flex bison bc libelf-dev libssl-dev (scripts/setup.d/42-guest-kernel.sh).
# Env: IMP_KERNEL_JOBS (default 2), IMP_KERNEL_KEEP_TREE=1 keeps the build tree for debugging.
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
here="$IMP_ROOT/scripts/bootkit/kernel"
fragment="$here/imp.config"
checker="$IMP_ROOT/scripts/bootkit/check-kernel-config.sh"
jobs="${IMP_KERNEL_JOBS:-2}"
out_parent="$IMP_BUILD_CACHE/guest-kernel"
current_dir="$IMP_CACHE/guest-kernel"
mkdir -p "$out_parent" "$current_dir"
# One build at a time: setup and a developer's manual run may overlap, and the build is heavy.
exec 9>"$out_parent/.lock"
flock 9

# Pinned by name: the fragment's option names are 6.1's. A machine with another linux-source-X.Y
# installed beside it (6.12 renamed options) must not build that one.
KERNEL_SOURCE_PACKAGE="${IMP_KERNEL_SOURCE_PACKAGE:-linux-source-6.1}"
tarball="/usr/src/$KERNEL_SOURCE_PACKAGE.tar.xz"
[[ -f "$tarball" ]] || { echo "Cannot build the guest kernel: no $tarball (apt package $KERNEL_SOURCE_PACKAGE)" >&2; exit 1; }
src_pkg="$(dpkg-query -S "$tarball" | cut -d: -f1)"
src_version="$(dpkg-query -W -f='${Version}' "$src_pkg")"
key_input="$(
  echo "$src_pkg $src_version"
  cat "$fragment" "$here/build.sh"
)"
key="$src_version-$(printf '%s' "$key_input" | sha256sum | cut -c1-12)"
out="$out_parent/$key"

if [[ ! -f "$out/.complete" ]]; then
  log "building guest kernel $key from $src_pkg $src_version (several minutes on 2 cores)"
  start=$SECONDS
  rm -rf "$out.tmp" && mkdir -p "$out.tmp"
  tree="$out.tmp/tree"
  mkdir -p "$tree"
  tar -xJf "$tarball" -C "$tree" --strip-components=1
  extract_s=$((SECONDS - start))
  export ARCH=x86_64
  # Debian's tree is pristine upstream plus Debian patches; no Debian config or signing is involved.
  {
    nice -n 10 make -C "$tree" -s tinyconfig
    (cd "$tree" && ./scripts/kconfig/merge_config.sh -m .config "$fragment")
    nice -n 10 make -C "$tree" -s olddefconfig
  } >"$out.tmp/build.log" 2>&1 || { tail -n 30 "$out.tmp/build.log" >&2; echo "Cannot build the guest kernel: configuring failed (log: $out.tmp/build.log)" >&2; exit 1; }

  # Every request in the fragment must have survived olddefconfig: a dependency we forgot silently
  # drops an option otherwise, and the kernel would boot without it.
  mismatch=0
  while IFS= read -r line; do
    case "$line" in
      CONFIG_*=*) want="$line" name="${line%%=*}" ;;
      "# CONFIG_"*" is not set") name="${line#\# }" name="${name%% *}" want="# $name is not set" ;;
      *) continue ;;
    esac
    got="$(grep -E "^(# )?$name[= ]" "$tree/.config" | head -n 1 || true)"
    # An option that is off may also be absent altogether (its menu is off).
    if [[ "$got" != "$want" && ! ( "$want" == "# $name is not set" && -z "$got" ) ]]; then
      echo "Cannot build the guest kernel: imp.config asks for '$want' but the merged .config has '${got:-nothing}'" >&2
      mismatch=1
    fi
  done <"$fragment"
  [[ "$mismatch" == 0 ]] || exit 1
  bash "$checker" "$tree/.config" || { echo "Cannot build the guest kernel: check-kernel-config.sh rejected the merged .config" >&2; exit 1; }

  build_start=$SECONDS
  nice -n 10 make -C "$tree" -j"$jobs" bzImage >>"$out.tmp/build.log" 2>&1 || {
    tail -n 30 "$out.tmp/build.log" >&2
    echo "Cannot build the guest kernel: make failed (log: $out.tmp/build.log)" >&2
    exit 1
  }
  build_s=$((SECONDS - build_start))
  cp "$tree/vmlinux" "$out.tmp/vmlinux"
  cp "$tree/arch/x86/boot/bzImage" "$out.tmp/bzImage"
  cp "$tree/.config" "$out.tmp/config"
  release="$(make -C "$tree" -s kernelrelease)"
  [[ "${IMP_KERNEL_KEEP_TREE:-}" == 1 ]] || rm -rf "$tree"
  cat >"$out.tmp/manifest.json" <<JSON
{
  "key": "$key",
  "sourcePackage": "$src_pkg",
  "sourceVersion": "$src_version",
  "release": "$release",
  "vmlinux": "$out/vmlinux",
  "bzImage": "$out/bzImage",
  "config": "$out/config",
  "jobs": $jobs,
  "extractSeconds": $extract_s,
  "buildSeconds": $build_s,
  "totalSeconds": $((SECONDS - start)),
  "vmlinuxBytes": $(stat -c %s "$out.tmp/vmlinux"),
  "bzImageBytes": $(stat -c %s "$out.tmp/bzImage")
}
JSON
  touch "$out.tmp/.complete"
  rm -rf "$out" && mv "$out.tmp" "$out"
  log "built guest kernel $release in $((SECONDS - start)) s (make: $build_s s with -j$jobs)"
fi

# Checked again on every run, cached or not: the checker may have become stricter since the build.
bash "$checker" "$out/config" || { echo "Cannot use the guest kernel $key: check-kernel-config.sh rejects its .config" >&2; exit 1; }
cp "$out/manifest.json" "$current_dir/current.json.tmp"
mv "$current_dir/current.json.tmp" "$current_dir/current.json"
# Keep the three newest kernels (other checkouts may use older keys); a kernel is cheap to keep
# (~30 MB) but slow to rebuild.
ls -1dt "$out_parent"/*/.complete 2>/dev/null | sed 's#/.complete$##' | tail -n +4 | xargs -r rm -rf
log "guest kernel: $out"
