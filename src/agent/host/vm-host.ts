/**
 * What a machine needs before it can run any VM, built once per process by the node agent and by
 * `imp run` alike: the KVM measurement, the image store and base-image cache with the guest agent
 * injected, the VMM drivers, and which VMM a VM then boots under. Both used to build these
 * themselves, with their own copies of the loopback-registry rule and of the driver set-up.
 */
import { join } from "node:path";
import type { Logger } from "../../shared/index.ts";
import { fileDigestOf } from "../image/cache/index.ts";
import { isLoopbackRegistry } from "../image/pull/index.ts";
import { FirecrackerDriver, probeKvm, QemuDriver, readHostTscKhz, type AccelMode, type KvmProbeResult, type VmmDriver, type VmmKind } from "../vmm/index.ts";
import { VmImages } from "./vm-images.ts";

export interface VmHostOptions {
  /** Holds `images/` (content store, base images, scratch templates) and `vms/` (one directory per VM). */
  readonly stateDir: string;
  /** The guest agent binary injected into every image. */
  readonly guestAgent: string;
  readonly accel: AccelMode;
  readonly qemu: { readonly binary: string; readonly vhostDeviceVsock?: string | undefined };
  /** Absent: no Firecracker on this machine. */
  readonly firecracker?: { readonly binary: string } | undefined;
  readonly imageCacheMaxBytes: number;
  /** Registries spoken to over plain HTTP besides those on loopback; `"all"` for every registry. */
  readonly plainHttpRegistries: readonly string[] | "all";
  /** Accept images from local OCI layouts (`oci:DIR`, `oci-archive:FILE`): `imp run` only. */
  readonly localLayouts?: boolean;
  /** Console bytes a guest may write before its VM is marked down (the drivers' default otherwise). */
  readonly maxConsoleBytes?: number | undefined;
  readonly logger: Logger;
}

export interface VmHost {
  readonly kvm: KvmProbeResult;
  readonly images: VmImages;
  readonly drivers: ReadonlyMap<VmmKind, VmmDriver>;
  /** VMMs that can boot a VM here: QEMU always, Firecracker only with KVM. */
  readonly vmms: readonly VmmKind[];
  /** The VMM a VM boots under: the wanted one where it can boot, else QEMU; `auto` prefers Firecracker with KVM. */
  vmmFor(wanted: VmmKind | "auto"): VmmKind;
}

export async function openVmHost(o: VmHostOptions): Promise<VmHost> {
  const kvm = await probeKvm({ mode: o.accel, qemuBinary: o.qemu.binary });
  o.logger.info({ kvm: kvm.kvm, accel: kvm.accel, reason: kvm.reason, ms: kvm.ms }, "kvm probe");
  const plain = o.plainHttpRegistries;
  const images = await VmImages.open({
    root: join(o.stateDir, "images"),
    guestAgent: { path: o.guestAgent, digest: await fileDigestOf(o.guestAgent) },
    cacheMaxBytes: o.imageCacheMaxBytes,
    plainHttp: (registry) => plain === "all" || plain.includes(registry) || isLoopbackRegistry(registry),
    localLayouts: o.localLayouts === true,
    logger: o.logger,
  });
  const drivers = new Map<VmmKind, VmmDriver>([["qemu", new QemuDriver({ qemuBinary: o.qemu.binary, vhostDeviceVsock: o.qemu.vhostDeviceVsock, accel: kvm.accel, tscKhz: await readHostTscKhz(), maxConsoleBytes: o.maxConsoleBytes })]]);
  if (o.firecracker !== undefined) drivers.set("firecracker", new FirecrackerDriver({ firecrackerBinary: o.firecracker.binary, maxConsoleBytes: o.maxConsoleBytes }));
  const vmms = [...drivers.keys()].filter((kind) => kind === "qemu" || kvm.kvm);
  return {
    kvm,
    images,
    drivers,
    vmms,
    vmmFor: (wanted) => {
      const kind = wanted === "auto" ? (vmms.includes("firecracker") ? "firecracker" : "qemu") : wanted;
      // Firecracker needs KVM; without it the VM boots under QEMU rather than not at all.
      return vmms.includes(kind) ? kind : "qemu";
    },
  };
}
