#!/usr/bin/env bash
# fetch-kernel.sh DEST_PARENT
# Puts Debian's cloud kernel (the package that `linux-image-cloud-amd64` currently depends on) into
# DEST_PARENT/<package>_<version>/ without installing it: `apt-get download` + `dpkg-deb -x`, then
# `depmod -b` to generate modules.dep (the package ships none; its postinst would). Installing the
# package instead would rebuild Debian's initramfs for a minute and touch /boot. Prints the directory.
set -euo pipefail
parent="$1"

resolve() { apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'; }
pkg="$(resolve)"
if [[ -z "$pkg" ]]; then
  apt-get update -qq >/dev/null
  pkg="$(resolve)"
fi
[[ -n "$pkg" ]] || { echo "Cannot fetch kernel: linux-image-cloud-amd64 has no linux-image dependency in apt's lists" >&2; exit 1; }
version="$(apt-cache policy "$pkg" | awk '/Candidate:/{print $2; exit}')"
dest="$parent/${pkg}_${version}"
if [[ -f "$dest/.complete" ]]; then
  echo "$dest"
  exit 0
fi

rm -rf "$dest" "$dest.tmp"
mkdir -p "$dest.tmp/deb"
# apt drops privileges to _apt for downloads; a directory it can write avoids its warning.
chmod 0777 "$dest.tmp/deb"
if ! (cd "$dest.tmp/deb" && apt-get download -qq "$pkg=$version" >/dev/null 2>&1); then
  rm -rf "$dest.tmp"
  # Stale lists can name a version the archive no longer serves: refresh them once, resolve again.
  if [[ -z "${IMP_FETCH_KERNEL_RETRIED:-}" ]]; then
    apt-get update -qq >/dev/null
    IMP_FETCH_KERNEL_RETRIED=1 exec bash "$0" "$@"
  fi
  echo "Cannot fetch kernel: apt-get download $pkg=$version failed" >&2
  exit 1
fi
dpkg-deb -x "$dest.tmp/deb/"*.deb "$dest.tmp/root"
rm -rf "$dest.tmp/deb"
# Newer (usr-merged) packages ship usr/lib/modules; depmod -b and modprobe -d look in lib/modules.
if [[ ! -d "$dest.tmp/root/lib/modules" && -d "$dest.tmp/root/usr/lib/modules" ]]; then
  ln -s usr/lib "$dest.tmp/root/lib"
fi
release="$(ls "$dest.tmp/root/lib/modules")"
depmod -b "$dest.tmp/root" "$release"
echo "$release" >"$dest.tmp/release"
touch "$dest.tmp/.complete"
mv "$dest.tmp" "$dest"
echo "$dest"
