#!/usr/bin/env bash
# Helm v4 (helm.sh/helm/v4), for `helm lint`, `helm template` and real installs of the chart in
# deploy/helm/imp (test/integration/helm), built from the Go module proxy into the machine-wide
# build cache, keyed by Helm's and Go's versions (a cold build is ~10 min of both cores, at nice 10).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
HELM_VERSION="${HELM_VERSION:-v4.3.2}"
dir="$IMP_BUILD_CACHE/helm-$HELM_VERSION-$(go env GOVERSION)"
build_once "$dir" helm -- nice -n 10 "$IMP_ROOT/scripts/build/go-module.sh" helm.sh/helm/v4 "$HELM_VERSION" ./cmd/helm "$dir/helm" "-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
mkdir -p "$IMP_CACHE/bin"
ln -sfn "$dir/helm" "$IMP_CACHE/bin/helm"
"$IMP_CACHE/bin/helm" version --short >&2
