/**
 * The key of a memory snapshot: everything a restored VM must share with the template it is restored
 * from. QEMU loads device state only into the very machine it was saved from (same devices, memory,
 * vCPUs, kernel and command line), and the guest's memory remembers the disks it booted from (the
 * base image, which carries the guest agent, and a scratch disk of that size). Paths do not belong
 * in it (each VM has its own); contents do.
 */
import { createHash } from "node:crypto";

/**
 * Bumped when what a snapshot holds or how it is made changes. 2: the template runs its image's
 * warm-up before the save, so a snapshot made before cannot stand for one made now.
 */
const SNAPSHOT_FORMAT = 2;

export interface SnapshotKeyInput {
  /** The base image's cache key (its layers, the guest agent, the builder's format). */
  readonly imageKey: string;
  /** Digests of the kernel and initrd files. */
  readonly kernelDigest: string;
  readonly initrdDigest?: string;
  /** The whole kernel command line. */
  readonly cmdline: string;
  readonly vcpus: number;
  readonly memoryMiB: number;
  readonly scratchBytes: number;
  /** Whether the VM has a network device (the template must have the same devices). */
  readonly network: boolean;
  /** The VMM and what of its set-up shapes the machine (binary digest, accelerator). */
  readonly vmm: string;
}

export function snapshotKey(input: SnapshotKeyInput): string {
  const canonical = JSON.stringify([
    SNAPSHOT_FORMAT, input.imageKey, input.kernelDigest, input.initrdDigest ?? null, input.cmdline,
    input.vcpus, input.memoryMiB, input.scratchBytes, input.network, input.vmm,
  ]);
  return createHash("sha256").update(canonical).digest("hex");
}
