#!/usr/bin/env bash
# check-kernel-config.sh CONFIG_FILE
# Lists the kernel options a production (Firecracker) guest kernel must have built in (=y) for Imp but
# that CONFIG_FILE lacks or has only as modules, then the options it must NOT have (neither y nor m)
# but has, and a kernel version older than 5.8 (from the "# Linux/<arch> X.Y.Z Kernel Configuration"
# header every generated .config has); exits 1 if any. The reasons are in
# docs/kernel-requirements.md; keep the two lists in step.
set -euo pipefail
config="$1"
[[ -r "$config" ]] || { echo "Cannot check kernel config: $config is not readable" >&2; exit 2; }
required=(
  VIRTIO_MMIO VIRTIO_MMIO_CMDLINE_DEVICES VIRTIO_BLK EXT4_FS OVERLAY_FS VSOCKETS VIRTIO_VSOCKETS
  DEVTMPFS TMPFS UNIX98_PTYS CGROUPS MEMCG CGROUP_PIDS CPUSETS CGROUP_BPF VIRTIO_NET
  SERIAL_8250 SERIAL_8250_CONSOLE SERIO_I8042 KEYBOARD_ATKBD VT KVM_GUEST PARAVIRT
  NAMESPACES PID_NS NET_NS USER_NS SECCOMP_FILTER UNIX INET IPV6 PACKET PROC_FS SYSFS BINFMT_ELF BINFMT_SCRIPT
  # Docker in the job (dockerd, containerd, runc with iptables-nft on cgroup v2); docs/kernel-requirements.md.
  UTS_NS IPC_NS POSIX_MQUEUE SECCOMP CGROUP_SCHED FAIR_GROUP_SCHED CFS_BANDWIDTH BLK_CGROUP KEYS
  EXT4_FS_POSIX_ACL EXT4_FS_SECURITY VETH BRIDGE BRIDGE_NETFILTER
  NETFILTER NETFILTER_ADVANCED NF_CONNTRACK NF_NAT NF_NAT_MASQUERADE NF_TABLES NF_TABLES_IPV4 NFT_NAT NFT_COMPAT
  NETFILTER_XTABLES NETFILTER_XT_MATCH_ADDRTYPE NETFILTER_XT_MATCH_CONNTRACK NETFILTER_XT_TARGET_MASQUERADE NETFILTER_XT_NAT
  NF_CT_NETLINK
)
# VSOCKETS_LOOPBACK would let guest processes reach the guest agent's vsock port. RT_GROUP_SCHED keeps
# the cgroup v2 cpu controller from being enabled; OVERLAY_FS_REDIRECT_DIR makes Docker's overlay2
# fall back to its slow naive diff.
forbidden=(VSOCKETS_LOOPBACK RT_GROUP_SCHED OVERLAY_FS_REDIRECT_DIR)
missing=0
# The agent mounts /proc with hidepid=invisible, which needs Linux >= 5.8.
version="$(sed -n 's/^# Linux\/[^ ]* \([0-9]*\)\.\([0-9]*\)[^ ]* Kernel Configuration$/\1 \2/p' "$config" | head -n 1)"
if [[ -z "$version" ]]; then
  printf '%-37s %s\n' "kernel version" "unknown (no '# Linux/<arch> X.Y.Z Kernel Configuration' header; need >= 5.8)"
  missing=1
else
  read -r major minor <<<"$version"
  if ((major < 5 || (major == 5 && minor < 8))); then
    printf '%-37s %s\n' "kernel version" "$major.$minor (need >= 5.8)"
    missing=1
  fi
fi
for option in "${required[@]}"; do
  value="$(sed -n "s/^CONFIG_${option}=\(.*\)/\1/p" "$config" | head -n 1)"
  if [[ "$value" != y ]]; then
    printf 'CONFIG_%-30s %s\n' "$option" "${value:-not set}"
    missing=1
  fi
done
for option in "${forbidden[@]}"; do
  value="$(sed -n "s/^CONFIG_${option}=\(.*\)/\1/p" "$config" | head -n 1)"
  if [[ -n "$value" && "$value" != n ]]; then
    printf 'CONFIG_%-30s %s (must not be set)\n' "$option" "$value"
    missing=1
  fi
done
exit "$missing"
