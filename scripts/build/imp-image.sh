#!/usr/bin/env bash
# Imp's own container image, `imp/imp:<version>`: one image for the operator and the agent (the chart
# runs `imp operator` and `imp agent` from it), built from Debian packages and this checkout, with no
# registry but Debian's and npm's:
#   layer 1  Debian 12 minbase + images/imp/packages.txt (QEMU, nftables, iproute2, e2fsprogs, …),
#            made by mmdebstrap in scripts/setup.d/58-runner-rootfs.sh and cached there by key;
#   layer 2  the pinned Node.js, the sources (tests left out), the production npm packages, the guest
#            agent, the supervisor, vhost-device-vsock and Imp's guest kernel.
# Output: an OCI image layout in $IMP_CACHE/images/imp and the same as a tar (`ctr images import`,
# `skopeo copy oci-archive:…`), keyed by the inputs' hash, so an unchanged checkout builds nothing.
# Prints `<ref> <manifest digest> <layout dir> <tar>`.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
cd "$IMP_ROOT"
version="$(node -p 'require("./package.json").version')"
ref="imp/imp:$version"
base="$IMP_CACHE/rootfs/imp"
[[ -s "$base/layer.tar.gz" ]] || { echo "imp-image: no base layer at $base (run scripts/setup.d/58-runner-rootfs.sh)" >&2; exit 1; }
kernel="$(node -p 'require("./.cache/guest-kernel/current.json").bzImage')"
node_bin="$IMP_ROOT/node_modules/node/bin/node"
vsock="$(ls "$IMP_CACHE"/vhost-device-vsock-*/bin/vhost-device-vsock 2>/dev/null | head -n1 || true)"
inputs=("$node_bin" "$kernel" "$IMP_CACHE/guest/imp-guest" "$IMP_CACHE/supervisor/imp-supervisor" "$base/layer.digest")
[[ -n "$vsock" ]] && inputs+=("$vsock")
for f in "${inputs[@]}"; do [[ -s "$f" ]] || { echo "imp-image: missing input $f (run scripts/setup.sh)" >&2; exit 1; }; done
# The files as they are in the work tree (not the index: an uncommitted change is an input too).
key="$( { git ls-files -z src bin package.json package-lock.json | xargs -0 sha256sum; sha256sum "${inputs[@]}"; sha256sum "$0"; } | sha256sum | cut -c1-16)"
out="$IMP_CACHE/images/imp"
if [[ -s "$out/key" && "$(cat "$out/key")" == "$key" && -s "$out.tar" ]]; then
  echo "$ref $(cat "$out/digest") $out $out.tar"
  exit 0
fi
work="$(mktemp -d "$IMP_CACHE/.imp-image.XXXXXX")"
trap 'rm -rf "$work"' EXIT
root="$work/root"
mkdir -p "$root/opt/imp/bin" "$root/usr/local/bin" "$root/usr/local/lib/imp"
# Sources without their tests; the production npm packages from the lockfile (npm's cache serves them).
git ls-files -z src bin package.json package-lock.json | grep -zv '\.test\.ts$' | xargs -0 cp --parents -t "$root/opt/imp"
(cd "$root/opt/imp" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
rm -f "$root/opt/imp/package-lock.json"
install -m 0755 "$node_bin" "$root/usr/local/bin/node"
ln -s /opt/imp/bin/imp.js "$root/usr/local/bin/imp"
install -m 0644 "$kernel" "$root/usr/local/lib/imp/bzImage"
install -m 0755 "$IMP_CACHE/guest/imp-guest" "$root/usr/local/lib/imp/imp-guest"
install -m 0755 "$IMP_CACHE/supervisor/imp-supervisor" "$root/usr/local/lib/imp/imp-supervisor"
[[ -n "$vsock" ]] && install -m 0755 "$vsock" "$root/usr/local/bin/vhost-device-vsock"
chmod -R a+rX "$root"
# Reproducible: sorted, no times, no owners but root.
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=gnu -C "$root" -cf "$work/app.tar" .
app_diffid="$(sha256sum "$work/app.tar" | cut -d' ' -f1)"
pigz -n -6 <"$work/app.tar" >"$work/app.tar.gz"
app_digest="$(sha256sum "$work/app.tar.gz" | cut -d' ' -f1)"
base_digest="$(cat "$base/layer.digest")"
base_diffid="$(cat "$base/layer.diffid")"
layout="$work/layout"
mkdir -p "$layout/blobs/sha256"
cp "$base/layer.tar.gz" "$layout/blobs/sha256/$base_digest"
mv "$work/app.tar.gz" "$layout/blobs/sha256/$app_digest"
cat >"$work/config.json" <<JSON
{"architecture":"amd64","os":"linux","config":{"Entrypoint":["imp"],"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"WorkingDir":"/","Labels":{"org.opencontainers.image.title":"imp","org.opencontainers.image.version":"$version"}},"rootfs":{"type":"layers","diff_ids":["sha256:$base_diffid","sha256:$app_diffid"]},"history":[{"created_by":"mmdebstrap bookworm minbase + images/imp/packages.txt"},{"created_by":"scripts/build/imp-image.sh"}]}
JSON
config_digest="$(sha256sum "$work/config.json" | cut -d' ' -f1)"
cp "$work/config.json" "$layout/blobs/sha256/$config_digest"
size() { stat -c %s "$1"; }
cat >"$work/manifest.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:$config_digest","size":$(size "$work/config.json")},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:$base_digest","size":$(size "$base/layer.tar.gz")},{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:$app_digest","size":$(size "$layout/blobs/sha256/$app_digest")}]}
JSON
manifest_digest="$(sha256sum "$work/manifest.json" | cut -d' ' -f1)"
cp "$work/manifest.json" "$layout/blobs/sha256/$manifest_digest"
echo '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
cat >"$layout/index.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:$manifest_digest","size":$(size "$work/manifest.json"),"annotations":{"org.opencontainers.image.ref.name":"$ref","io.containerd.image.name":"docker.io/$ref"}}]}
JSON
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$layout" -cf "$work/imp.tar" .
echo "sha256:$manifest_digest" >"$work/digest"
echo "$key" >"$work/key"
rm -rf "$out" "$out.tar"
mkdir -p "$(dirname "$out")"
mv "$work/imp.tar" "$out.tar"
mv "$layout" "$out"
mv "$work/digest" "$work/key" "$out/"
log "imp-image: $ref sha256:$manifest_digest ($(du -sh "$out.tar" | cut -f1), app layer $(du -sh "$out/blobs/sha256/$app_digest" | cut -f1))"
echo "$ref sha256:$manifest_digest $out $out.tar"
