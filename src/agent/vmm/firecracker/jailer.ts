import { chown, link, mkdir, rm, stat } from "node:fs/promises";
import { dirname } from "node:path";
import { terminalError } from "../../../shared/index.ts";
import type { VmSpec } from "../types.ts";
import { inJail, type FirecrackerLayout, type JailLayout } from "./layout.ts";

/**
 * Running Firecracker under its jailer: the jailer enters a new mount namespace, pivots into the
 * chroot, creates the device nodes Firecracker needs there (/dev/kvm, /dev/net/tun, /dev/urandom),
 * optionally joins a network namespace, drops to `uid`/`gid` and execs Firecracker (same pid, so the
 * launched process is the VMM). What the VM uses must already be inside the chroot: the driver
 * hard-links each file (no copy of multi-GiB disks, no bind mount that could outlive a crash) and
 * gives the jailed user the files Firecracker writes.
 */
export interface JailerOptions {
  readonly binary: string;
  /** Parent of all chroots; must be on the same filesystem as the VM's files (hard links). */
  readonly chrootBaseDir: string;
  readonly uid: number;
  readonly gid: number;
  /** Network namespace the VM joins (a path such as `/var/run/netns/<name>`); its tap lives there. */
  readonly netnsOf?: (spec: VmSpec) => string | undefined;
}

/** Pure: the jailer's argv (without the binary). Firecracker's own arguments follow `--`. */
export function jailerArgv(options: JailerOptions, firecrackerBinary: string, layout: FirecrackerLayout, netns: string | undefined): string[] {
  if (layout.jail === undefined) throw terminalError("JailerConfigInvalid", "Cannot build jailer arguments for an unjailed layout (configure the driver with jailer options)");
  for (const [what, n] of [["uid", options.uid], ["gid", options.gid]] as const) {
    if (!Number.isInteger(n) || n < 0) throw terminalError("JailerConfigInvalid", `Cannot jail with ${what} ${n}: need a non-negative integer (fix the jailer ${what} in the node config)`);
  }
  return [
    "--id", layout.id,
    "--exec-file", firecrackerBinary,
    "--uid", String(options.uid),
    "--gid", String(options.gid),
    "--chroot-base-dir", options.chrootBaseDir,
    ...(netns === undefined ? [] : ["--netns", netns]),
    // The jailer passes Firecracker its --id (and start times) itself; a second --id is refused.
    "--",
    "--api-sock", layout.vmm.apiSocket,
  ];
}

/** Pure: Firecracker's own argv (without the binary); the configuration goes over the API. */
export function firecrackerArgv(layout: FirecrackerLayout): string[] {
  return ["--api-sock", layout.vmm.apiSocket, "--id", layout.id];
}

/**
 * Creates the chroot and links every resource in. The caller registers {@link removeJail} before
 * calling, so a failure halfway leaves nothing. Errors are terminal: they are facts of the host's
 * layout (a file on another filesystem, a missing file), which retrying does not change.
 */
export async function prepareJail(jail: JailLayout, owner: { readonly uid: number; readonly gid: number }, vm: string): Promise<void> {
  await mkdir(jail.root, { recursive: true, mode: 0o755 });
  // Firecracker creates its sockets in the chroot's top directory as the jailed user.
  await chown(jail.root, owner.uid, owner.gid);
  for (const entry of jail.links) {
    const target = inJail(jail, entry.inside);
    await mkdir(dirname(target), { recursive: true });
    try {
      await link(entry.hostPath, target);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      const why = code === "EXDEV" ? `it is on another filesystem than the chroot base ${jail.dir}` : (err as Error).message;
      throw terminalError("JailerSetupFailed", `Cannot link ${entry.hostPath} into the jail of VM ${vm}: ${why}`, { cause: err, context: { vm, path: entry.hostPath } });
    }
    // A hard link shares the inode: only files this VM owns (its scratch disk, log, metrics) change owner.
    if (entry.writable) await chown(target, owner.uid, owner.gid);
  }
}

/** Removes the whole jail directory (chroot, device nodes, links, the jailer's copy of Firecracker). Idempotent. */
export async function removeJail(jail: JailLayout): Promise<void> {
  // The jailer bind-mounts the chroot only inside its own mount namespace, which ends with the VMM,
  // and the driver mounts nothing: removal only unlinks (a hard link never touches the original).
  await rm(jail.dir, { recursive: true, force: true });
}

export async function jailExists(jail: JailLayout): Promise<boolean> {
  return (await stat(jail.dir).catch(() => undefined)) !== undefined;
}
