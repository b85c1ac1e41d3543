#!/usr/bin/env bash
# kube-apiserver, kube-controller-manager, kubectl and etcd, built from their Go modules.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
apt_need openssl util-linux
bash "$IMP_ROOT/scripts/build-test-binaries.sh" >/dev/null
