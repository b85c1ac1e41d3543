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
import { join } from "node:path";
import type { Command } from "commander";
import {
  bootPipeline,
  DEFAULT_MAX_CONSOLE_BYTES,
  DEFAULT_WORKLOAD_ENV,
  DirectLauncher,
  openVmHost,
  runToEnd,
  type BootDeps,
  type VmBootRequest,
  type VmHost,
  type VmOutcome,
} from "../../agent/index.ts";
import { cacheDir as impCacheDir } from "../../devcluster/index.ts";
import { describeError, NO_FAULTS, silentLogger, systemClock, terminalError } from "../../shared/index.ts";
import { humanBytes } from "./image/common.ts";
import { progressView } from "./image/pull-progress.ts";
import { bootKitDefaults, envOf, readyVmsDir, shapeOf, type RunOpts, type RunShape } from "./run-inputs.ts";
import { Interrupts } from "./run-interrupts.ts";
import { BootProgress, OutputSink, withTicker } from "./run-view.ts";

/** imp run's own failures (not the command's): as `docker run` does, so a command's exit 1 stays distinguishable. */
export const RUN_FAILED_EXIT_CODE = 125;
export function registerRun(program: Command): void {
  program
    .command("run")
    .description("boot one VM from an image on this machine and run a command in it (no Kubernetes)")
    .requiredOption("--image <ref>", "image: host[:port]/repository[:tag][@sha256:...] from a registry, oci:DIR[:TAG] (an OCI image layout) or oci-archive:FILE[:TAG]")
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

async function run(argv: readonly string[], opts: RunOpts): Promise<number> {
  const shape = shapeOf(opts);
  const env = envOf(opts.env);
  const say = (line: string): void => {
    if (opts.quiet !== true) process.stderr.write(`${line}\n`);
  };
  const interrupts = new Interrupts();
  const signal = interrupts.boot.signal;
  process.on("SIGINT", interrupts.handler).on("SIGTERM", interrupts.handler);
  try {
    const { host, request, stateDir } = await openRun(argv, opts, shape, env, signal, say);
    const progress = new BootProgress(say, { vmm: shape.vmm, accel: host.kvm.accel, vcpus: shape.vcpus, memoryMiB: shape.memoryMiB });
    const output = new OutputSink();
    const outcome = await runToEnd(bootPipeline(bootDeps(host, stateDir, shape, opts, output, say)), { request, log: silentLogger }, {
      signal,
      log: silentLogger,
      onStep: (name, event) => progress.step(name, event),
      failed: (_step, err) => Promise.reject(err),
      delivered: (vm) => {
        interrupts.forward = (sig) => void vm.client.signal(vm.execId, sig, { timeoutMs: shape.timeouts.requestMs }).catch(() => undefined);
      },
      follow: {
        clock: systemClock,
        timeouts: shape.timeouts,
        clientName: "imp-run",
        maxConsoleBytes: DEFAULT_MAX_CONSOLE_BYTES,
        stopped: () => (signal.aborted ? { succeeded: false, reason: "Interrupted", message: describeError(signal.reason) } : undefined),
      },
      // In reverse once the command ended: guest channel, VM (its processes and sockets), VM directory.
      rollbackAtEnd: true,
    });
    await output.flushed();
    return exitCodeOf(outcome);
  } finally {
    interrupts.forward = undefined;
    process.off("SIGINT", interrupts.handler).off("SIGTERM", interrupts.handler);
  }
}

/** Everything before the boot: boot kit, VM host, the image pulled with progress, the request. */
async function openRun(argv: readonly string[], opts: RunOpts, shape: RunShape, env: Record<string, string>, signal: AbortSignal, say: (line: string) => void): Promise<{ host: VmHost; request: VmBootRequest; stateDir: string }> {
  const cache = impCacheDir();
  const kit = await bootKitDefaults(cache);
  const kernel = opts.kernel ?? kit?.kernel;
  const initrd = opts.initrd ?? (opts.kernel === undefined ? kit?.initrd : undefined);
  if (kernel === undefined) throw terminalError("KernelMissing", `Cannot run: no --kernel given and no boot kit at ${join(cache, "bootkit", "current.json")} (run scripts/setup.d/40-bootkit.sh)`);
  const guestAgent = opts.guestAgent ?? join(cache, "guest", "imp-guest");
  if (!existsSync(guestAgent)) throw terminalError("GuestAgentMissing", `Cannot run: no guest agent at ${guestAgent} (--guest-agent)`);
  const stateDir = opts.stateDir ?? process.env.IMP_RUN_STATE_DIR ?? join(cache, "run");
  const host = await openVmHost({
    stateDir,
    guestAgent,
    accel: "auto",
    qemu: { binary: opts.qemu, vhostDeviceVsock: opts.vhostDeviceVsock ?? kit?.vhostDeviceVsock },
    firecracker: { binary: opts.firecracker ?? join(cache, "firecracker-1.12.1", "bin", "firecracker") },
    imageCacheMaxBytes: 20 * 1024 ** 3,
    plainHttpRegistries: opts.plainHttp === true ? "all" : [],
    localLayouts: true,
    logger: silentLogger,
  });
  if (shape.vmm === "firecracker" && !host.vmms.includes("firecracker")) throw terminalError("KvmUnavailable", `Cannot run under Firecracker: no usable KVM here (${host.kvm.reason})`);
  // Pulled with progress into the store the boot's image step reads; that step then builds (or finds) the ext4 base.
  const view = opts.quiet === true ? undefined : progressView(process.stderr.isTTY === true);
  try {
    say(`pulling ${opts.image}`);
    await host.images.pull(opts.image, { signal, ...(view === undefined ? {} : { onProgress: view.onProgress }) });
  } finally {
    view?.stop();
  }
  await readyVmsDir(stateDir);
  const request: VmBootRequest = {
    id: `run-${process.pid}-${randomBytes(4).toString("hex")}`,
    name: "imp-run",
    vmm: shape.vmm,
    vcpus: shape.vcpus,
    memoryMiB: shape.memoryMiB,
    scratchBytes: shape.scratchBytes,
    image: { image: opts.image, extraLayers: [] },
    // The boot kit's kernel wants the serial console, as the node agent's kernels do.
    kernel: { kernel, ...(initrd === undefined ? {} : { initrd }), args: ["console=ttyS0", "quiet"] },
    bootArgs: [],
    requiresSetup: false,
    workload: { argv, env: { ...DEFAULT_WORKLOAD_ENV, ...env }, ...(opts.cwd === undefined ? {} : { cwd: opts.cwd }) },
  };
  return { host, request, stateDir };
}

/** imp run's ports: the host's images (with a ticker while the base builds), direct children, no network, no setup. */
function bootDeps(host: VmHost, stateDir: string, shape: RunShape, opts: RunOpts, output: OutputSink, say: (line: string) => void): BootDeps {
  return {
    stateDir,
    images: {
      ensure: async (image, abort) => {
        const built = await withTicker(opts.quiet !== true, "building the VM image (ext4, guest agent injected)", () => host.images.ensure(image, abort));
        say(`image ready: ${humanBytes(built.sizeBytes)}`);
        return built;
      },
      disks: (dir, image, bytes) => host.images.disks(dir, image, bytes),
    },
    launch: {
      drivers: host.drivers,
      // Direct children that die with this process: even a SIGKILL of imp run leaves no VM running.
      launcherFor: () => new DirectLauncher({ dieWithParent: true }),
      allocateCid: () => 3,
      releaseCid: () => undefined,
    },
    workload: { recordSent: async () => undefined, onOutput: (event) => output.write(event) },
    clock: systemClock,
    timeouts: shape.timeouts,
    faults: NO_FAULTS,
    clientName: "imp-run",
  };
}

/** imp run's exit code: the command's (128 + N when killed by signal N); 125 when the VM, not the command, failed. */
export function exitCodeOf(outcome: VmOutcome): number {
  if (outcome.exitCode !== undefined) return outcome.exitCode;
  throw terminalError("RunFailed", `Cannot run the command to its end: ${outcome.reason}: ${outcome.message}`);
}
