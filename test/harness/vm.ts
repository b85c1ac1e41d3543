/**
 * Boots a real QEMU VM (Debian cloud kernel, Imp's initramfs, the real guest agent as PID 1) for a
 * test or a benchmark, and always kills it. The boot kit comes from scripts/setup.d/40-bootkit.sh
 * ($IMP_CACHE/bootkit/current.json). Every boot is bounded; the VM's serial console, QEMU's stderr
 * and the vsock backend's log are copied to test-results/e2e/<name>/ unless the test passed.
 */
import { execFile } from "node:child_process";
import { cp, mkdir, mkdtemp, readFile, rm } from "node:fs/promises";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import type { SuiteContext, TestContext } from "node:test";
import { fileDigestOf, GuestClient, readHostTscKhz } from "../../src/agent/index.ts";
import { QemuVm, type QemuChannelKind, type RunningVm, type VmSpec } from "../../src/agent/vmm/index.ts";
import { connectGuest } from "../../src/agent/vm/index.ts";
import { type ExecRequest, type HelloReply } from "../../src/agent/guest/index.ts";
import { describeError, ImpError } from "../../src/shared/index.ts";

const run = promisify(execFile);
const repoRoot = resolve(import.meta.dirname, "../..");
const cacheDir = process.env.IMP_CACHE ?? join(repoRoot, ".cache");

/** What scripts/bootkit/build.sh wrote to $IMP_CACHE/bootkit/current.json. */
export interface BootKit {
  readonly key: string;
  readonly kernel: string;
  readonly initrd: string;
  readonly rootfs: string;
  readonly kernelRelease: string;
  /** The extracted kernel package (boot/config-*, lib/modules/<release>/modules.dep). */
  readonly kernelDir: string;
  readonly guestInit: string;
  readonly guestSha256: string;
  readonly vhostDeviceVsock: string | null;
  readonly vhostDeviceVsockError: string | null;
}

let kitPromise: Promise<BootKit> | undefined;

/**
 * The current boot kit. Fails with instructions when setup has not run or when the guest agent
 * binary changed since the kit was built (the rootfs would carry a stale agent).
 */
export function loadBootKit(): Promise<BootKit> {
  kitPromise ??= (async () => {
    const path = join(cacheDir, "bootkit", "current.json");
    if (!existsSync(path)) throw new Error(`Cannot boot a test VM: ${path} is missing; run scripts/setup.sh (or scripts/setup.d/40-bootkit.sh)`);
    const kit = JSON.parse(await readFile(path, "utf8")) as BootKit;
    const guestBin = process.env.IMP_GUEST_BIN ?? join(cacheDir, "guest", "imp-guest");
    if (existsSync(guestBin)) {
      const sha = await sha256File(guestBin);
      if (sha !== kit.guestSha256) {
        throw new Error(`Cannot boot a test VM: the boot kit's rootfs carries an older guest agent than ${guestBin}; run scripts/setup.d/40-bootkit.sh`);
      }
    }
    return kit;
  })();
  return kitPromise;
}

/** The channel tests use by default: vsock when vhost-device-vsock was built, else virtio-serial. */
export async function defaultChannel(): Promise<"vsock" | "serial"> {
  return (await loadBootKit()).vhostDeviceVsock === null ? "serial" : "vsock";
}

export interface TestVmOptions {
  /** Names the VM's log directory under test-results/e2e/. */
  readonly name: string;
  readonly channel?: "vsock" | "serial";
  readonly memoryMiB?: number;
  /** Size of the sparse ext4 scratch disk (/dev/vdb, the overlay's upper layer). 0 = no scratch disk. */
  readonly scratchMiB?: number;
  /** Replaces `init=` (e.g. to prove a bad init fails fast). */
  readonly init?: string;
  readonly extraCmdline?: readonly string[];
  /** From spawn to a `hello` reply. */
  readonly bootTimeoutMs?: number;
}

export interface TestVm {
  readonly vm: QemuVm;
  /** The current primary connection, past `hello` (replaced by `reconnect()`). */
  readonly client: GuestClient;
  readonly hello: HelloReply;
  /** Milliseconds from spawning QEMU to the `hello` reply. */
  readonly bootMs: number;
  /** This VM's private copy of the base image (attached writable, so that a stray write would show). */
  readonly rootfs: string;
  /** The scratch disk image, or undefined without one. */
  readonly scratch: string | undefined;
  readonly channel: "vsock" | "serial";
  /** Error codes of the failed vsock dial attempts made while the guest booted (empty over serial). */
  readonly bootDialFailures: readonly string[];
  /**
   * An additional connection to the guest agent, past `hello`. vsock only: QEMU's virtio-serial
   * socket serves one host connection at a time (use `reconnect()` there).
   */
  connect(timeoutMs?: number): Promise<GuestClient>;
  /** Drops the primary connection and opens a new one (the agent's reconnect path); works on both channels. */
  reconnect(timeoutMs?: number): Promise<GuestClient>;
  /** Stops the VM and removes its files; keeps the logs under test-results/ unless `passed`. Idempotent. */
  dispose(passed: boolean): Promise<void>;
}

/** Boots a VM and connects to its guest agent. On any failure the VM is stopped and its logs kept. */
export async function bootTestVm(options: TestVmOptions): Promise<TestVm> {
  const kit = await loadBootKit();
  const channel = options.channel ?? (await defaultChannel());
  if (channel === "vsock" && kit.vhostDeviceVsock === null) {
    throw new Error(`Cannot boot a vsock VM: vhost-device-vsock is not available (${kit.vhostDeviceVsockError ?? "unknown reason"})`);
  }
  // Short path: Unix socket names inside must stay under 108 bytes.
  const dir = await mkdtemp(join(tmpdir(), "imp-vm-"));
  const rootfs = join(dir, "rootfs.ext4");
  const scratchMiB = options.scratchMiB ?? 256;
  const scratch = scratchMiB > 0 ? join(dir, "scratch.ext4") : undefined;
  try {
    await cp(kit.rootfs, rootfs);
    if (scratch !== undefined) await makeScratchDisk(scratch, scratchMiB);
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }

  const cmdline = [
    "console=ttyS0", "quiet", "panic=-1", "ro", "root=/dev/vda", `init=${options.init ?? kit.guestInit}`,
    ...(scratch === undefined ? [] : ["imp.scratch=/dev/vdb"]),
    ...(options.extraCmdline ?? []),
  ];
  const tscKhz = await readHostTscKhz();
  const started = performance.now();
  let vm: QemuVm;
  try {
    vm = await QemuVm.start({
      dir: join(dir, "vm"),
      channel: channel as QemuChannelKind,
      dieWithParent: true,
      ...(kit.vhostDeviceVsock === null ? {} : { vhostDeviceVsock: kit.vhostDeviceVsock }),
      machine: {
        kernel: kit.kernel,
        initrd: kit.initrd,
        cmdline,
        memoryMiB: options.memoryMiB ?? 512,
        vcpus: 1,
        accel: "tcg",
        ...(tscKhz === undefined ? {} : { tscKhz }),
        drives: [
          { id: "root", path: rootfs },
          ...(scratch === undefined ? [] : [{ id: "scratch", path: scratch }]),
        ],
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

  const bootDialFailures: string[] = [];
  // The agent's own connect (hello repeated over virtio-serial with growing waits), so the tests prove it.
  const connect = (timeoutMs = 30_000, onAttemptFailed?: (err: ImpError) => void): Promise<GuestClient> =>
    connectGuest(vm, { timeoutMs, serial: channel === "serial", clientName: "imp-e2e", ...(onAttemptFailed === undefined ? {} : { onAttemptFailed }) });

  try {
    const timeoutMs = options.bootTimeoutMs ?? 60_000;
    let client = await connect(timeoutMs, (err) => bootDialFailures.push(err.code));
    const hello = await client.hello();
    const bootMs = performance.now() - started;
    return {
      vm, hello, bootMs, rootfs, scratch, channel, bootDialFailures, dispose,
      get client() {
        return client;
      },
      connect: async (ms) => {
        if (channel === "serial") throw new Error("Cannot open a second connection over virtio-serial: QEMU serves one at a time; use reconnect()");
        return connect(ms);
      },
      reconnect: async (ms) => {
        client.close();
        client = await connect(ms);
        return client;
      },
    };
  } catch (err) {
    await dispose(false);
    throw new Error(`Cannot boot test VM ${options.name} (${channel}): ${describeError(err)}\n--- serial console tail ---\n${vm.serial.tail(40)}`, { cause: err });
  }
}

/** A sparse file formatted ext4 by the host: the guest never formats (docs/guest-protocol.md). */
/**
 * A VM spec on the boot kit: its kernel, initramfs and guest agent, the read-only root as /dev/vda
 * and `scratch` as /dev/vdb (the guest's overlay), then `extraDrives` in order.
 */
export function bootKitVmSpec(kit: BootKit, vm: { name: string; dir: string; memoryMiB: number; scratch: string; guestCid: number; extraDrives?: VmSpec["drives"] }): VmSpec {
  return {
    name: vm.name,
    dir: vm.dir,
    vcpus: 1,
    memoryMiB: vm.memoryMiB,
    kernel: kit.kernel,
    initrd: kit.initrd,
    cmdline: `console=ttyS0 quiet panic=-1 ro root=/dev/vda init=${kit.guestInit} imp.scratch=/dev/vdb`,
    drives: [
      { id: "root", path: kit.rootfs, readOnly: true, isRoot: true },
      { id: "scratch", path: vm.scratch, readOnly: false, isRoot: false },
      ...(vm.extraDrives ?? []),
    ],
    guestCid: vm.guestCid,
  };
}

/**
 * Connects to a driver-started VM's guest agent and says hello, asking again while the answer times
 * out (over virtio-serial the first hello may be lost before the guest opens its port). On failure
 * the connection is closed; the VM is the caller's to stop.
 */
export async function helloFrom(vm: Pick<RunningVm, "connectGuest" | "downSignal">, timeoutMs: number, clientName: string): Promise<GuestClient> {
  const deadline = Date.now() + timeoutMs;
  const client = new GuestClient(await vm.connectGuest({ timeoutMs }), { clientName });
  client.on("close", () => undefined);
  for (;;) {
    try {
      await client.hello({ timeoutMs: 500, signal: vm.downSignal });
      return client;
    } catch (err) {
      if (vm.downSignal.aborted || Date.now() >= deadline || client.closed || !(err instanceof ImpError && err.code === "GuestTimeout")) {
        client.close();
        throw err;
      }
    }
  }
}

export async function makeScratchDisk(path: string, sizeMiB: number): Promise<void> {
  await run("truncate", ["-s", `${sizeMiB}M`, path]);
  await run("mkfs.ext4", ["-q", "-F", "-L", "imp-scratch", path]);
}

/** Hex sha256 of a file (the agent's `fileDigestOf` without its `sha256:` prefix). */
export async function sha256File(path: string): Promise<string> {
  return (await fileDigestOf(path)).slice("sha256:".length);
}

/** Runs `debugfs -R <request>` read-only against an ext4 image (no mount needed). */
export async function debugfs(image: string, request: string): Promise<string> {
  const { stdout } = await run("debugfs", ["-R", request, image]);
  return stdout;
}

export interface ExecResult {
  readonly exitCode: number;
  readonly signal: string | undefined;
  readonly stdout: string;
  readonly stderr: string;
  readonly started: boolean;
}

/** Runs one exec to its `exit` event, collecting its output. Bounded by `timeoutMs`. */
export async function runExec(client: GuestClient, request: ExecRequest, timeoutMs = 30_000): Promise<ExecResult> {
  const out = { stdout: [] as Buffer[], stderr: [] as Buffer[] };
  const signal = AbortSignal.timeout(timeoutMs);
  const events = client.events({ signal });
  const reply = await client.exec(request);
  if (reply.state !== "running") {
    throw new Error(`Cannot run ${request.execId}: state ${reply.state} ${reply.error ?? ""}`);
  }
  for await (const event of events) {
    if (event.execId !== request.execId) continue;
    if (event.type === "output") out[event.stream].push(Buffer.from(event.data, "base64"));
    else {
      return {
        exitCode: event.exitCode,
        signal: event.signal,
        stdout: Buffer.concat(out.stdout).toString(),
        stderr: Buffer.concat(out.stderr).toString(),
        started: reply.started,
      };
    }
  }
  throw new Error(`Cannot run ${request.execId}: no exit event within ${timeoutMs} ms (or the stream closed)`);
}

/**
 * Whether any test of a suite failed, for `dispose(passed)`: register `afterEach(failures.record)`
 * and read `failures.any` in `after` (a suite's own `passed` is not final inside its `after` hook).
 */
export function failureTracker(): { record: (t: TestContext | SuiteContext) => void; readonly any: boolean } {
  let any = false;
  return {
    // TestContext.passed exists at run time (Node ≥ 21.7) but is missing from @types/node 24.
    record: (t) => {
      if ((t as unknown as { passed?: boolean }).passed !== true) any = true;
    },
    get any() {
      return any;
    },
  };
}

async function keepLogs(name: string, vmDir: string): Promise<void> {
  const dest = join(repoRoot, "test-results", "e2e", `${name.replace(/[^A-Za-z0-9._-]+/g, "-")}-${Date.now()}`);
  await mkdir(dest, { recursive: true });
  for (const file of ["serial.log", "qemu.log", "vhost-device-vsock.log"]) {
    if (existsSync(join(vmDir, file))) await cp(join(vmDir, file), join(dest, file));
  }
}
