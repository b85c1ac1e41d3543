#!/usr/bin/env bash
# Builds the real control-plane binaries the tests and `imp dev cluster` run:
# kube-apiserver, kube-controller-manager and kubectl from the k8s.io/kubernetes Go module, and
# etcd from go.etcd.io/etcd/server/v3; with the argument `node`, a node's instead (kubelet,
# kube-scheduler, kube-proxy and the pause program) for the real-node world (test/e2e/real-node). Results land in the machine-wide build cache
# ($IMP_BUILD_CACHE, keyed by version and Go version, shared by every checkout like Go's own cache)
# and are linked into this checkout's .cache/bin, so a second run, or another clone, builds nothing.
# k8s.io/kubernetes is not meant to be a dependency: it requires its staging modules at v0.0.0, so
# the throwaway module below maps each to the published v0.<minor>.<patch>.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.8}"
source "$(dirname "$0")/lib.sh"
cache="$IMP_CACHE"
gov="$(go env GOVERSION)"
kube_out="$IMP_BUILD_CACHE/kube-$KUBE_VERSION-$gov"
etcd_out="$IMP_BUILD_CACHE/etcd-$ETCD_VERSION-$gov"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
mkdir -p "$IMP_BUILD_CACHE" "$cache/bin"

# build_kube OUT CMD...: the k8s.io/kubernetes commands CMD into OUT, unless all are there already.
build_kube() {
  local out="$1"; shift
  local cmd missing=0
  for cmd in "$@"; do [[ -x "$out/$cmd" ]] || missing=1; done
  [[ $missing -eq 1 ]] || return 0
  local work="$IMP_BUILD_CACHE/.work/$(basename "$out")"
  rm -rf "$work" && mkdir -p "$work" "$out"
  cd "$work"
  go mod init imp.dev/build/kube >/dev/null 2>&1
  local staging="v0.${KUBE_VERSION#v1.}"
  local modfile
  modfile="$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  {
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    grep -E '^\s+k8s\.io/[a-z0-9-]+ v0\.0\.0$' "$modfile" | awk -v v="$staging" '{print "replace " $1 " => " $1 " " v}'
  } >>go.mod
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    for cmd in "$@"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$cmd"; done
    printf ')\n'
  } >tools.go
  go mod tidy -e >/dev/null 2>&1 || true
  local start=$SECONDS
  local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION"
  for cmd in "$@"; do
    go build -trimpath -ldflags "$ldflags" -o "$out/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
    mv "$out/$cmd.tmp" "$out/$cmd"
  done
  echo "built $* $KUBE_VERSION in $((SECONDS - start)) s" >&2
}

# A node's pause program (the Pod sandbox's one process), from Kubernetes' own source, static.
build_pause() {
  local out="$1"
  [[ -x "$out/pause" ]] && return 0
  local src
  src="$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  gcc -Os -static -o "$out/pause.tmp" "$src/build/pause/linux/pause.c"
  strip "$out/pause.tmp"
  mv "$out/pause.tmp" "$out/pause"
}

build_etcd() {
  if [[ -x "$etcd_out/etcd" ]]; then return 0; fi
  local work="$IMP_BUILD_CACHE/.work/etcd-$ETCD_VERSION"
  rm -rf "$work" && mkdir -p "$work" "$etcd_out"
  cd "$work"
  go mod init imp.dev/build/etcd >/dev/null 2>&1
  echo "require go.etcd.io/etcd/server/v3 $ETCD_VERSION" >>go.mod
  printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >tools.go
  go mod tidy -e >/dev/null 2>&1 || true
  local start=$SECONDS
  go build -trimpath -ldflags "-s -w" -o "$etcd_out/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$etcd_out/etcd.tmp" "$etcd_out/etcd"
  echo "built etcd $ETCD_VERSION in $((SECONDS - start)) s" >&2
}

if [[ "${1:-}" == "node" ]]; then
  # A node's binaries (scripts/setup.d/26-kube-node.sh), built beside the control plane's.
  node_out="$IMP_BUILD_CACHE/kube-node-$KUBE_VERSION-$gov"
  exec 8>"$IMP_BUILD_CACHE/.kube-node.lock"
  flock 8
  build_kube "$node_out" kubelet kube-scheduler kube-proxy
  build_pause "$node_out"
  rm -rf "$IMP_BUILD_CACHE/.work/$(basename "$node_out")"
  ln -sfn "$node_out" "$cache/bin/kube-node-$KUBE_VERSION"
  echo "$cache/bin/kube-node-$KUBE_VERSION"
  exit 0
fi
# One build per machine at a time: two checkouts setting up at once wait for each other.
exec 8>"$IMP_BUILD_CACHE/.kube-etcd.lock"
flock 8
build_etcd
build_kube "$kube_out" kube-apiserver kube-controller-manager kubectl
rm -rf "$IMP_BUILD_CACHE/.work/etcd-$ETCD_VERSION" "$IMP_BUILD_CACHE/.work/$(basename "$kube_out")"
# A checkout set up before the cache moved has real directories here.
for link in "$cache/bin/kube-$KUBE_VERSION" "$cache/bin/etcd-$ETCD_VERSION"; do
  [[ -L "$link" || ! -e "$link" ]] || rm -rf "$link"
done
ln -sfn "$kube_out" "$cache/bin/kube-$KUBE_VERSION"
ln -sfn "$etcd_out" "$cache/bin/etcd-$ETCD_VERSION"
echo "$cache/bin/kube-$KUBE_VERSION"
echo "$cache/bin/etcd-$ETCD_VERSION"
