#!/bin/busybox sh
# /init of Imp's test initramfs (busybox-static). It does only what the Debian cloud kernel cannot do
# by itself: load the modules listed in /etc/imp-modules (dependency order, computed on the host from
# modules.dep), mount the root disk READ-ONLY and hand over to the program named by `init=` with
# switch_root. Everything else (overlay root on the scratch disk, /proc, /dev, networking) is the
# guest agent's job once it runs as PID 1.
#
# Kernel command line read here (from /proc/cmdline: the kernel does not pass `init=` or dotted keys
# to us as environment):
#   root=/dev/vda | LABEL=x | UUID=x   the root disk (default /dev/vda)
#   rootfstype=ext4                    (default ext4)
#   init=/.imp/imp-guest               the program to become PID 1 (default /sbin/init)
#   imp.rootwait=<seconds>             how long to wait for the root device (default 10)
# Any failure prints "imp-initramfs: FATAL: ..." on the console and exits, which panics the kernel;
# with panic=-1 and QEMU's -no-reboot the VM then stops instead of hanging.
export PATH=/bin
busybox mount -t proc proc /proc
busybox mount -t sysfs sysfs /sys
busybox mount -t devtmpfs devtmpfs /dev

fatal() {
  echo "imp-initramfs: FATAL: $*" >/dev/console
  exit 1
}

root=/dev/vda
rootfstype=ext4
init=/sbin/init
rootwait=10
for arg in $(cat /proc/cmdline); do
  case "$arg" in
    root=*) root="${arg#root=}" ;;
    rootfstype=*) rootfstype="${arg#rootfstype=}" ;;
    init=*) init="${arg#init=}" ;;
    imp.rootwait=*) rootwait="${arg#imp.rootwait=}" ;;
  esac
done

while read -r mod; do
  [ -n "$mod" ] || continue
  insmod "/lib/modules/$mod" || fatal "cannot load module $mod"
done </etc/imp-modules

# virtio devices are probed as their driver loads, but be tolerant of slow probing; bounded.
tries=$((rootwait * 20))
dev=""
while [ "$tries" -gt 0 ]; do
  case "$root" in
    LABEL=* | UUID=*) dev="$(findfs "$root" 2>/dev/null)" ;;
    *) dev="$root" ;;
  esac
  [ -n "$dev" ] && [ -b "$dev" ] && break
  dev=""
  tries=$((tries - 1))
  usleep 50000
done
[ -n "$dev" ] || fatal "root device $root did not appear within ${rootwait}s"

mkdir -p /newroot
# ro + noload: never replay a journal or touch the base image; it is shared by every VM.
mount -t "$rootfstype" -o ro,noload "$dev" /newroot || fatal "cannot mount $dev ($rootfstype) read-only"
[ -x "/newroot$init" ] || fatal "init $init is not an executable file on $dev"

umount /proc /sys /dev 2>/dev/null
exec switch_root /newroot "$init"
