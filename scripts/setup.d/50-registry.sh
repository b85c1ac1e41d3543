#!/usr/bin/env bash
# A real OCI registry and image tools for the image-pull tests: Debian's docker-registry (run on loopback by
# test/harness/registry.ts), htpasswd for its basic-auth config, skopeo and umoci to cross-check images,
# busybox-static whose binary the tests package into test images (and into the sample image at
# $IMP_CACHE/images/busybox), openssl for the token server's certificate.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
apt_need docker-registry apache2-utils skopeo umoci busybox-static openssl
# The README's first `imp run` boots this busybox image from a local OCI layout: no registry needed.
node scripts/build/sample-image.ts "$IMP_CACHE/images/busybox"
# The Debian package starts a registry on :5000 as a system service; the tests run their own on free ports.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet docker-registry 2>/dev/null; then
  systemctl disable --now docker-registry >/dev/null 2>&1 || true
fi
