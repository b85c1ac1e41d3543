/**
 * `imp run --image REF -- CMD ARGS…`: one VM on this machine, no Kubernetes. Pulls and builds the
 * image (with the guest agent injected), boots it under QEMU (KVM when the probe finds it usable,
 * else TCG) or Firecracker, runs the command through the guest agent with its output streamed live,
 * and exits with the command's exit code. Ctrl-C and SIGTERM go to the command as signals. Every VM
 * process is a direct child started with die-with-parent, so even a SIGKILL of `imp run` leaves no
 * VM running; the VM directory lives under the state directory and is removed on the way out (one
 * left by a killed run is removed by the next run).
 */
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, readdir, readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import type { Command } from "commander";
import {
  bootPipeline,
  DEFAULT_MAX_CONSOLE_BYTES,
  DEFAULT_RUNTIME_TIMEOUTS,
  DirectLauncher,
  fileDigestOf,
  FirecrackerDriver,
  followToEnd,
  ImagePuller,
  FsContentStore,
  probeKvm,
  QemuDriver,
  readHostTscKhz,
  VmDir,
  VmImages,
  type BootDeps,
  type OutputEvent,
  type RuntimeTimeouts,
  type SignalName,
  type VmBootRequest,
  type VmmDriver,
  type VmmKind,
  type VmOutcome,
} from "../../agent/index.ts";
import { cacheDir as impCacheDir } from "../../devcluster/index.ts";
import { describeError, NO_FAULTS, processState, silentLogger, systemClock, terminalError } from "../../shared/index.ts";
import { humanBytes } from "./image/common.ts";
import { progressView } from "./image/pull-progress.ts";

interface RunOpts {
  image: string;
  cpus: string;
  memory: string;
  vmm: string;
  disk: string;
  env: string[];
  cwd?: string;
  guestAgent?: string;
  kernel?: string;
  initrd?: string;
  qemu: string;
  vhostDeviceVsock?: string;
  firecracker?: string;
  stateDir?: string;
  plainHttp?: boolean;
  bootTimeout: string;
  quiet?: boolean;
}

/** imp run's own failures (not the command's): as `docker run` does, so a command's exit 1 stays distinguishable. */
export const RUN_FAILED_EXIT_CODE = 125;
const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const TIMEOUTS: Omit<RuntimeTimeouts, "bootMs"> = { ...DEFAULT_RUNTIME_TIMEOUTS, requestMs: 30_000, stopGraceMs: 3_000, powerOffMs: 5_000 };

export function registerRun(program: Command): void {
  program
    .command("run")
    .description("boot one VM from an image on this machine and run a command in it (no Kubernetes)")
    .requiredOption("--image <ref>", "image reference: host[:port]/repository[:tag][@sha256:...]")
    .option("--cpus <n>", "vCPUs", "1")
    .option("--memory <MiB>", "guest memory in MiB", "512")
    .option("--vmm <kind>", "qemu | firecracker (Firecracker needs usable KVM)", "qemu")
    .option("--disk <MiB>", "scratch disk (the writable layer over the image) in MiB", "1024")
    .option("--env <KEY=VALUE>", "environment variable for the command; repeatable (PATH defaults to the usual one)", (v: string, acc: string[]) => [...acc, v], [])
    .option("--cwd <dir>", "working directory of the command in the guest")
    .option("--guest-agent <path>", "guest agent binary injected into the image (default $IMP_CACHE/guest/imp-guest)")
    .option("--kernel <path>", "guest kernel (default: the boot kit's, $IMP_CACHE/bootkit/current.json)")
    .option("--initrd <path>", "initramfs (default: the boot kit's)")
    .option("--qemu <path>", "QEMU binary", "qemu-system-x86_64")
    .option("--vhost-device-vsock <path>", "vsock backend for QEMU (default: the boot kit's; without one the guest channel is virtio-serial)")
    .option("--firecracker <path>", "Firecracker binary (default $IMP_CACHE/firecracker-1.12.1/bin/firecracker)")
    .option("--state-dir <dir>", "content store, image cache and VM directories (default $IMP_RUN_STATE_DIR or $IMP_CACHE/run)")
    .option("--plain-http", "speak plain HTTP to the registry (loopback registries always do)")
    .option("--boot-timeout <seconds>", "from starting the VMM to the guest agent's hello", "180")
    .option("-q, --quiet", "no progress on stderr")
    .argument("<command...>", "the command and its arguments (after --)")
    .action(async (command: string[], opts: RunOpts) => {
      try {
        process.exitCode = await run(command, opts);
      } catch (err) {
        process.stderr.write(`imp run: ${describeError(err)}\n`);
        process.exitCode = RUN_FAILED_EXIT_CODE;
      }
    });
}

/** What the signal handlers act on: the boot until the command runs, then the command. */
interface Interrupts {
  readonly boot: AbortController;
  forward: ((signal: SignalName) => void) | undefined;
  count: number;
}

async function run(argv: readonly string[], opts: RunOpts): Promise<number> {
  const vcpus = positiveInt("--cpus", opts.cpus, 64);
  const memoryMiB = positiveInt("--memory", opts.memory, 1024 * 1024);
  const diskMiB = positiveInt("--disk", opts.disk, 1024 * 1024);
  const bootTimeoutMs = positiveInt("--boot-timeout", opts.bootTimeout, 3600) * 1000;
  if (opts.vmm !== "qemu" && opts.vmm !== "firecracker") throw terminalError("RunInvalid", `Cannot run: --vmm must be qemu or firecracker, not ${JSON.stringify(opts.vmm)}`);
  const vmm: VmmKind = opts.vmm;
  const env = envOf(opts.env);
  const say = (line: string): void => {
    if (opts.quiet !== true) process.stderr.write(`${line}\n`);
  };

  const interrupts: Interrupts = { boot: new AbortController(), forward: undefined, count: 0 };
  const onSignal = (signal: NodeJS.Signals): void => {
    interrupts.count++;
    if (interrupts.forward !== undefined && interrupts.count < 3) {
      interrupts.forward(signal === "SIGINT" ? "SIGINT" : "SIGTERM");
      return;
    }
    // Before the command runs (or a third time): give up; the boot's cleanups stop the VM.
    interrupts.boot.abort(terminalError("RunInterrupted", `Cannot run: interrupted by ${signal}`));
  };
  process.on("SIGINT", onSignal).on("SIGTERM", onSignal);
  try {
    const cache = impCacheDir();
    const kit = await bootKitDefaults(cache);
    const kernel = opts.kernel ?? kit?.kernel;
    const initrd = opts.initrd ?? (opts.kernel === undefined ? kit?.initrd : undefined);
    if (kernel === undefined) throw terminalError("KernelMissing", `Cannot run: no --kernel given and no boot kit at ${join(cache, "bootkit", "current.json")} (run scripts/setup.d/40-bootkit.sh)`);
    const guestAgent = opts.guestAgent ?? join(cache, "guest", "imp-guest");
    if (!existsSync(guestAgent)) throw terminalError("GuestAgentMissing", `Cannot run: no guest agent at ${guestAgent} (--guest-agent)`);
    const stateDir = opts.stateDir ?? process.env.IMP_RUN_STATE_DIR ?? join(cache, "run");
    const signal = interrupts.boot.signal;

    // Image: pulled with progress into the store VmImages uses; the boot's image step then builds (or finds) the ext4 base.
    const plainHttp = (registry: string): boolean => opts.plainHttp === true || /^(127\.|localhost(:|$)|\[::1\])/.test(registry);
    const imagesRoot = join(stateDir, "images");
    await mkdir(imagesRoot, { recursive: true });
    const view = opts.quiet === true ? undefined : progressView(process.stderr.isTTY === true);
    try {
      say(`pulling ${opts.image}`);
      await new ImagePuller({ plainHttp }).pull(opts.image, { store: await FsContentStore.open(join(imagesRoot, "store")), signal, ...(view === undefined ? {} : { onProgress: view.onProgress }) });
    } finally {
      view?.stop();
    }
    const images = await VmImages.open({ root: imagesRoot, guestAgent: { path: guestAgent, digest: await fileDigestOf(guestAgent) }, cacheMaxBytes: 20 * 1024 ** 3, plainHttp, logger: silentLogger });
    // VM directories live beside the image cache (the base disk is a hard link); a killed run's is removed by the next.
    await mkdir(VmDir.vmsDir(stateDir), { recursive: true });
    await removeStaleRunDirs(VmDir.vmsDir(stateDir));

    const kvm = await probeKvm({ mode: "auto", qemuBinary: opts.qemu });
    if (vmm === "firecracker" && !kvm.kvm) throw terminalError("KvmUnavailable", `Cannot run under Firecracker: no usable KVM here (${kvm.reason})`);
    const driver = await driverFor(vmm, kvm.accel, cache, opts, kit?.vhostDeviceVsock ?? undefined);
    const output = new OutputSink();
    const deps: BootDeps = {
      stateDir,
      images: {
        ensure: async (image, abort) => {
          const built = await withTicker(opts.quiet !== true, "building the VM image (ext4, guest agent injected)", () => images.ensure(image, abort));
          say(`image ready: ${humanBytes(built.sizeBytes)}`);
          return built;
        },
        disks: (dir, image, bytes) => images.disks(dir, image, bytes),
      },
      launch: {
        drivers: new Map([[vmm, driver]]),
        // Direct children that die with this process: even a SIGKILL of imp run leaves no VM running.
        launcherFor: () => new DirectLauncher({ dieWithParent: true }),
        allocateCid: () => 3,
        releaseCid: () => undefined,
      },
      workload: { recordSent: async () => undefined, onOutput: (event) => output.write(event) },
      clock: systemClock,
      timeouts: { ...TIMEOUTS, bootMs: bootTimeoutMs },
      faults: NO_FAULTS,
      clientName: "imp-run",
    };
    const request: VmBootRequest = {
      id: `run-${process.pid}-${randomBytes(4).toString("hex")}`,
      name: "imp-run",
      vmm,
      vcpus,
      memoryMiB,
      scratchBytes: diskMiB * 1024 * 1024,
      image: { image: opts.image, extraLayers: [] },
      // The boot kit's kernel wants the serial console, as the node agent's kernels do.
      kernel: { kernel, ...(initrd === undefined ? {} : { initrd }), args: ["console=ttyS0", "quiet"] },
      bootArgs: [],
      requiresSetup: false,
      workload: { argv, env: { PATH: DEFAULT_PATH, ...env }, ...(opts.cwd === undefined ? {} : { cwd: opts.cwd }) },
    };
    const progress = new BootProgress(say, { vmm, accel: kvm.accel, vcpus, memoryMiB });
    const { output: vm, run: booted } = await bootPipeline(deps).run({ request, log: silentLogger }, { signal, onStep: (name, event) => progress.step(name, event) });
    try {
      interrupts.forward = (sig) => void vm.client.signal(vm.execId, sig, { timeoutMs: TIMEOUTS.requestMs }).catch(() => undefined);
      const outcome = await followToEnd(vm, {
        clock: systemClock,
        timeouts: { ...TIMEOUTS, bootMs: bootTimeoutMs },
        clientName: "imp-run",
        maxConsoleBytes: DEFAULT_MAX_CONSOLE_BYTES,
        log: silentLogger,
        signal,
        stopped: () => (signal.aborted ? { succeeded: false, reason: "Interrupted", message: describeError(signal.reason) } : undefined),
      });
      await output.flushed();
      return exitCodeOf(outcome);
    } finally {
      interrupts.forward = undefined;
      // In reverse: guest channel, VM (its processes and sockets), VM directory.
      await booted.rollback();
    }
  } finally {
    process.off("SIGINT", onSignal).off("SIGTERM", onSignal);
  }
}

/** The command's own bytes, passed through as `docker run` does (the user asked for this output). */
class OutputSink {
  readonly #writes: Promise<void>[] = [];
  write(event: OutputEvent): void {
    const out = event.stream === "stdout" ? process.stdout : process.stderr;
    this.#writes.push(new Promise((resolve) => out.write(Buffer.from(event.data, "base64"), () => resolve())));
  }
  async flushed(): Promise<void> {
    await Promise.all(this.#writes);
  }
}

/** What imp run tells a person while the boot's steps run. */
class BootProgress {
  readonly #say: (line: string) => void;
  readonly #vm: { readonly vmm: VmmKind; readonly accel: string; readonly vcpus: number; readonly memoryMiB: number };
  #bootStarted = 0;

  constructor(say: (line: string) => void, vm: { readonly vmm: VmmKind; readonly accel: string; readonly vcpus: number; readonly memoryMiB: number }) {
    this.#say = say;
    this.#vm = vm;
  }

  step(name: string, event: "begin" | "end"): void {
    if (name === "vmm" && event === "begin") {
      const v = this.#vm;
      this.#say(`booting ${v.vmm === "qemu" ? `QEMU (${v.accel})` : "Firecracker"}: ${v.vcpus} vCPU, ${v.memoryMiB} MiB`);
    }
    if (name === "vmm" && event === "end") this.#bootStarted = performance.now();
    if (name === "guest" && event === "end") this.#say(`guest ready in ${((performance.now() - this.#bootStarted) / 1000).toFixed(1)} s`);
  }
}

/** imp run's exit code: the command's (128 + N when killed by signal N); 125 when the VM, not the command, failed. */
export function exitCodeOf(outcome: VmOutcome): number {
  if (outcome.exitCode !== undefined) return outcome.exitCode;
  throw terminalError("RunFailed", `Cannot run the command to its end: ${outcome.reason}: ${outcome.message}`);
}

async function driverFor(vmm: VmmKind, accel: "kvm" | "tcg", cache: string, opts: RunOpts, kitVsock: string | undefined): Promise<VmmDriver> {
  if (vmm === "firecracker") {
    return new FirecrackerDriver({ firecrackerBinary: opts.firecracker ?? join(cache, "firecracker-1.12.1", "bin", "firecracker") });
  }
  const tscKhz = accel === "tcg" ? await readHostTscKhz() : undefined;
  const vsock = opts.vhostDeviceVsock ?? kitVsock;
  return new QemuDriver({ qemuBinary: opts.qemu, accel, ...(tscKhz === undefined ? {} : { tscKhz }), ...(vsock === undefined ? {} : { vhostDeviceVsock: vsock }) });
}

interface BootKitDefaults {
  readonly kernel: string;
  readonly initrd: string;
  readonly vhostDeviceVsock: string | null;
}

async function bootKitDefaults(cache: string): Promise<BootKitDefaults | undefined> {
  const path = join(cache, "bootkit", "current.json");
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch {
    return undefined;
  }
  const kit = JSON.parse(text) as Partial<BootKitDefaults>;
  if (typeof kit.kernel !== "string" || typeof kit.initrd !== "string") throw terminalError("BootKitInvalid", `Cannot read boot kit ${path}: no kernel and initrd`);
  return { kernel: kit.kernel, initrd: kit.initrd, vhostDeviceVsock: typeof kit.vhostDeviceVsock === "string" ? kit.vhostDeviceVsock : null };
}

/** VM directories of runs that were killed (their pid is gone): nothing else would remove them. */
async function removeStaleRunDirs(vmsDir: string): Promise<void> {
  for (const name of await readdir(vmsDir)) {
    const pid = /^run-([0-9]+)-/.exec(name)?.[1];
    if (pid === undefined || Number(pid) === process.pid || processState(Number(pid)) !== "gone") continue;
    await rm(join(vmsDir, name), { recursive: true, force: true });
  }
}


/** Shows `what` with the seconds elapsed while `work` runs: a ticking line on a terminal, one line otherwise. */
async function withTicker<T>(show: boolean, what: string, work: () => Promise<T>): Promise<T> {
  if (!show) return work();
  const started = performance.now();
  const tty = process.stderr.isTTY === true;
  const line = (): string => `${what}… ${((performance.now() - started) / 1000).toFixed(0)} s`;
  if (!tty) process.stderr.write(`${what}…\n`);
  const timer = tty ? setInterval(() => process.stderr.write(`\r${line()}`), 500) : undefined;
  try {
    return await work();
  } finally {
    clearInterval(timer);
    if (tty) process.stderr.write(`\r${line()}\n`);
  }
}

function positiveInt(flag: string, text: string, max: number): number {
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 1 || value > max) throw terminalError("RunInvalid", `Cannot run: ${flag} must be a whole number in 1..${max}, not ${JSON.stringify(text)}`);
  return value;
}

function envOf(pairs: readonly string[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const pair of pairs) {
    const at = pair.indexOf("=");
    if (at <= 0) throw terminalError("RunInvalid", `Cannot run: --env takes KEY=VALUE, not ${JSON.stringify(pair)}`);
    env[pair.slice(0, at)] = pair.slice(at + 1);
  }
  return env;
}
