#!/usr/bin/env bash
# The node network manager (src/agent/network, docs/network.md) applies its firewall with the `nft`
# CLI and builds bridges, taps and veths with iproute2. Installs them only when missing.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
apt_need nftables iproute2
