#!/usr/bin/env bash
# A real Kubernetes node for test/e2e/real-node: kubelet, kube-scheduler and kube-proxy built from
# k8s.io/kubernetes at the control plane's version and cached like it, the pause program from
# Kubernetes' own pause.c, and Debian's containerd, runc, CNI plugins and iptables (kube-proxy's).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
apt_need containerd runc containernetworking-plugins gcc libc6-dev iptables conntrack
nice -n 10 bash "$IMP_ROOT/scripts/build-test-binaries.sh" node >/dev/null
