#!/usr/bin/env bash
# The kube runtime's connection-reuse test and bench/kube-client.ts count sockets with `ss` (iproute2).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
apt_need iproute2
