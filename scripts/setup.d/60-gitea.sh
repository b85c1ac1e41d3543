#!/usr/bin/env bash
# Gitea and its runner, for the real-forge tests and the Gitea demo: Gitea 1.27.3 (module
# code.gitea.io/gitea, which calls itself gitea.dev) and gitea-runner v1.0.8 (gitea.com/gitea/runner,
# the renamed act_runner), built from the Go module proxy into the machine-wide build cache,
# keyed by version and Go version. Pure Go (SQLite included): no tags, no cgo.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
GITEA_VERSION="${GITEA_VERSION:-v1.27.3}"
RUNNER_VERSION="${GITEA_RUNNER_VERSION:-v1.0.8}"
gov="$(go env GOVERSION)"
gitea_dir="$IMP_BUILD_CACHE/gitea-$GITEA_VERSION-$gov"
runner_dir="$IMP_BUILD_CACHE/gitea-runner-$RUNNER_VERSION-$gov"
build="$IMP_ROOT/scripts/build/go-module.sh"
build_once "$runner_dir" gitea-runner -- nice -n 10 "$build" gitea.com/gitea/runner "$RUNNER_VERSION" . "$runner_dir/gitea-runner" "-X gitea.com/gitea/runner/internal/pkg/ver.version=$RUNNER_VERSION"
build_once "$gitea_dir" gitea -- nice -n 10 "$build" code.gitea.io/gitea "$GITEA_VERSION" . "$gitea_dir/gitea" "-X main.Version=${GITEA_VERSION#v}"
# Gitea serves its templates and locales from the module source (no bindata build): tests point
# STATIC_ROOT_PATH there, and `go mod download` prints where it is.
go mod download -json "code.gitea.io/gitea@$GITEA_VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",\?$/\1/p' >"$gitea_dir/source-dir"
mkdir -p "$IMP_CACHE/bin"
ln -sfn "$gitea_dir/gitea" "$IMP_CACHE/bin/gitea"
ln -sfn "$runner_dir/gitea-runner" "$IMP_CACHE/bin/gitea-runner"
ln -sfn "$gitea_dir/source-dir" "$IMP_CACHE/bin/gitea-source-dir"
