#!/usr/bin/env bash
# Helm v4 (helm.sh/helm/v4), for `helm lint`, `helm template` and real installs of a Helm chart,
# built from the Go module proxy into the machine-wide build cache. Not a set-up step yet: nothing
# in the repository uses Helm until the chart exists, and the build costs ~10 min of both cores.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
HELM_VERSION="${HELM_VERSION:-v4.3.2}"
dir="$IMP_BUILD_CACHE/helm-$HELM_VERSION-$(go env GOVERSION)"
build_once "$dir" helm -- nice -n 10 "$IMP_ROOT/scripts/build/go-module.sh" helm.sh/helm/v4 "$HELM_VERSION" ./cmd/helm "$dir/helm" "-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
mkdir -p "$IMP_CACHE/bin"
ln -sfn "$dir/helm" "$IMP_CACHE/bin/helm"
"$IMP_CACHE/bin/helm" version --short >&2
