/**
 * Boots the boot kit's rootfs with the guest agent as PID 1 under either guest kernel, so a test and
 * the boot benchmark compare the two the same way:
 *   - "debian": Debian's cloud kernel + Imp's initramfs (loads the virtio modules, mounts root ro,noload);
 *   - "imp":    Imp's own kernel ($IMP_CACHE/guest-kernel/current.json, scripts/setup.d/42-guest-kernel.sh),
 *               no initramfs: the kernel mounts root itself with `root=/dev/vda rootflags=noload ro`.
 * test/harness/vm.ts's bootTestVm boots only the Debian kernel; this is its narrower twin (no
 * reconnects, one connection) that takes the kernel as a parameter. Every boot is bounded and the VM
 * is always killed; logs are kept under test-results/e2e/<name>-<time>/ unless the caller passed.
 */
import { cp, mkdir, mkdtemp, readFile, rm } from "node:fs/promises";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { GuestClient, readHostTscKhz } from "../../../src/agent/index.ts";
import { QemuVm, type QemuChannelKind } from "../../../src/agent/vmm/index.ts";
import { type HelloReply } from "../../../src/agent/guest/index.ts";
import { describeError, ImpError } from "../../../src/shared/index.ts";
import { loadBootKit, makeScratchDisk } from "../../harness/vm.ts";

const repoRoot = resolve(import.meta.dirname, "../../..");
const cacheDir = process.env.IMP_CACHE ?? join(repoRoot, ".cache");

/** What scripts/bootkit/kernel/build.sh wrote to $IMP_CACHE/guest-kernel/current.json. */
export interface GuestKernelManifest {
  readonly key: string;
  readonly sourcePackage: string;
  readonly sourceVersion: string;
  readonly release: string;
  readonly vmlinux: string;
  readonly bzImage: string;
  readonly config: string;
  readonly jobs: number;
  readonly buildSeconds: number;
  readonly totalSeconds: number;
}

export const guestKernelManifestPath = join(cacheDir, "guest-kernel", "current.json");

/** Imp's guest kernel, or undefined when scripts/setup.d/42-guest-kernel.sh has not built it. */
export async function loadGuestKernel(): Promise<GuestKernelManifest | undefined> {
  if (!existsSync(guestKernelManifestPath)) return undefined;
  return JSON.parse(await readFile(guestKernelManifestPath, "utf8")) as GuestKernelManifest;
}

export type GuestKernelKind = "debian" | "imp";

/**
 * Kernel image, initramfs and the kernel-specific part of the command line for one kind. `impBuild`:
 * another build of Imp's kernel (a directory of the guest-kernel build cache, with its
 * manifest.json) instead of this checkout's, e.g. one from an older imp.config to compare with.
 */
export async function kernelBoot(kind: GuestKernelKind, impBuild?: string): Promise<{ kernel: string; initrd: string | undefined; cmdline: string[]; label: string }> {
  const kit = await loadBootKit();
  if (kind === "debian") {
    return { kernel: kit.kernel, initrd: kit.initrd, cmdline: ["ro", "root=/dev/vda"], label: `debian ${kit.kernelRelease} + initramfs` };
  }
  const own = impBuild === undefined ? await loadGuestKernel() : (JSON.parse(await readFile(join(impBuild, "manifest.json"), "utf8")) as GuestKernelManifest);
  if (own === undefined) throw new Error(`Cannot boot Imp's guest kernel: ${guestKernelManifestPath} is missing; run scripts/setup.d/42-guest-kernel.sh`);
  // The kernel mounts the root the way the initramfs does: read-only and without replaying the
  // journal (noload), because one base image backs every VM. No rootwait: virtio-blk probes
  // synchronously before the root is mounted, and a missing disk must panic (and end the VM), not hang.
  return { kernel: own.bzImage, initrd: undefined, cmdline: ["ro", "root=/dev/vda", "rootfstype=ext4", "rootflags=noload"], label: `imp ${own.release} (build ${own.key}), no initramfs` };
}

export interface KernelVm {
  readonly vm: QemuVm;
  readonly client: GuestClient;
  readonly hello: HelloReply;
  /** Milliseconds from spawning QEMU to the `hello` reply. */
  readonly bootMs: number;
  /** The kernel command line QEMU was given. */
  readonly cmdline: string;
  /** Stops the VM and removes its files; keeps the logs unless `passed`. Idempotent. */
  dispose(passed: boolean): Promise<void>;
}

export interface KernelVmOptions {
  readonly name: string;
  readonly kernel: GuestKernelKind;
  /** With kernel "imp": another build of Imp's kernel (see kernelBoot). */
  readonly impBuild?: string;
  readonly channel: "vsock" | "serial";
  readonly bootTimeoutMs?: number;
  readonly extraCmdline?: readonly string[];
}

/** Boots, connects and says `hello` within one deadline (default 90 s: CI machines are noisy). */
export async function bootKernelVm(options: KernelVmOptions): Promise<KernelVm> {
  const kit = await loadBootKit();
  const boot = await kernelBoot(options.kernel, options.impBuild);
  if (options.channel === "vsock" && kit.vhostDeviceVsock === null) {
    throw new Error(`Cannot boot a vsock VM: vhost-device-vsock is not available (${kit.vhostDeviceVsockError ?? "unknown reason"})`);
  }
  const dir = await mkdtemp(join(tmpdir(), "imp-kvm-"));
  const rootfs = join(dir, "rootfs.ext4");
  const scratch = join(dir, "scratch.ext4");
  try {
    await cp(kit.rootfs, rootfs);
    await makeScratchDisk(scratch, 256);
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
  const cmdline = ["console=ttyS0", "quiet", "panic=-1", ...boot.cmdline, `init=${kit.guestInit}`, "imp.scratch=/dev/vdb", ...(options.extraCmdline ?? [])];
  const tscKhz = await readHostTscKhz();
  const started = performance.now();
  let vm: QemuVm;
  try {
    vm = await QemuVm.start({
      dir: join(dir, "vm"),
      channel: options.channel as QemuChannelKind,
      dieWithParent: true,
      ...(kit.vhostDeviceVsock === null ? {} : { vhostDeviceVsock: kit.vhostDeviceVsock }),
      machine: {
        kernel: boot.kernel,
        ...(boot.initrd === undefined ? {} : { initrd: boot.initrd }),
        cmdline,
        memoryMiB: 512,
        vcpus: 1,
        accel: "tcg",
        ...(tscKhz === undefined ? {} : { tscKhz }),
        drives: [{ id: "root", path: rootfs }, { id: "scratch", path: scratch }],
      },
    });
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }

  let disposed: Promise<void> | undefined;
  const dispose = (passed: boolean): Promise<void> => {
    disposed ??= (async () => {
      await vm.stop();
      if (!passed) await keepLogs(options.name, join(dir, "vm"));
      await rm(dir, { recursive: true, force: true });
    })();
    return disposed;
  };

  try {
    const timeoutMs = options.bootTimeoutMs ?? 90_000;
    const deadline = Date.now() + timeoutMs;
    const stream = await vm.connectGuest({ timeoutMs });
    const client = new GuestClient(stream, { clientName: "imp-kernel-test" });
    client.on("close", () => undefined);
    // A virtio-serial port may drop what the host sent before the guest opened it: ask again.
    let hello: HelloReply;
    for (;;) {
      try {
        hello = await client.hello({ timeoutMs: options.channel === "serial" ? 300 : Math.max(1, deadline - Date.now()), signal: vm.downSignal });
        break;
      } catch (err) {
        if (vm.downSignal.aborted || Date.now() >= deadline || client.closed || !(err instanceof ImpError && err.code === "GuestTimeout")) {
          client.close();
          throw err;
        }
      }
    }
    const bootMs = performance.now() - started;
    return { vm, client, hello, bootMs, cmdline: cmdline.join(" "), dispose };
  } catch (err) {
    await dispose(false);
    throw new Error(`Cannot boot ${options.name} (${boot.label}, ${options.channel}): ${describeError(err)}\n--- serial console tail ---\n${vm.serial.tail(40)}`, { cause: err });
  }
}

async function keepLogs(name: string, vmDir: string): Promise<void> {
  const dest = join(repoRoot, "test-results", "e2e", `${name}-${new Date().toISOString().replaceAll(":", "")}`);
  await mkdir(dest, { recursive: true });
  await cp(vmDir, dest, { recursive: true, filter: (src) => !src.endsWith(".sock") });
}
