/**
 * The steps of a VM's life on a node, each a typed segment of one {@link Pipeline}: what a step
 * needs is what the steps before it produced, so no step tests for state the types rule out. Every
 * step registers the cleanup of what it acquires at the moment it acquires it. `lifecycle.ts` puts
 * them together: the boot (prepare → launch → connect → configure → setup → exec), the re-adoption
 * after an agent restart (adopt → connect → follow) and `imp run` (the boot, with its own ports).
 */
import { randomBytes } from "node:crypto";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { RUNNER_SETUP } from "../../api/index.ts";
import { describeError, ImpError, terminalError, type Clock, type FaultPoints, type Logger } from "../../shared/index.ts";
import type { CacheClone, CacheVolumes } from "../cache/index.ts";
import type { CachedImage } from "../image/cache/index.ts";
import type { VmDisks } from "../image/disks/index.ts";
import { GUEST_AGENT_INIT } from "../image/layers/index.ts";
import type { GuestClient, OutputEvent } from "../guest/index.ts";
import { readVmRecord, type RunningVm, type VmMemorySnapshot, type VmmDriver, type VmmProcess, type VmRecord, type VmSpec } from "../vmm/index.ts";
import { EXIT_RECORD_KEY_BYTES, newExitRecordKey } from "../guest/index.ts";
import { handOffExec, workloadExecId } from "./exec-handoff.ts";
import { connectGuest } from "./guest-connection.ts";
import { Pipeline } from "./pipeline.ts";
import type { RuntimeTimeouts, VmBootRequest, VmImageSource, VmLaunchPorts, VmNetworkLease, VmNetworkProvider, WorkloadPorts } from "./ports.ts";
import { VmDir } from "./vm-dir.ts";

export type BootStepName = "vm-dir" | "image" | "snapshot" | "disks" | "cache" | "network" | "vmm" | "adopt" | "guest" | "configure" | "warm-up" | "save" | "setup" | "exec" | "follow";

/** Imp's kernel arguments: the read-only base as root, the guest agent as init, the scratch disk for the overlay. */
export const IMP_KERNEL_ARGS: readonly string[] = ["ro", "root=/dev/vda", `init=${GUEST_AGENT_INIT}`, "imp.scratch=/dev/vdb"];

/** Of the kernel's 2,048 bytes, what a driver's command line (`VmmDriver.cmdline`) may take: the rest is for what a driver adds at launch (QEMU's TSC frequency). */
const CMDLINE_BUDGET = 1_800;

/**
 * Imp's kernel arguments, with a cache clone's when the VM has one: the third disk, and where its
 * directories go. The API allows only paths of plain segments (no commas, no spaces), so the list
 * travels comma-separated.
 */
function impKernelArgs(cachePaths: readonly string[] | undefined): readonly string[] {
  return cachePaths === undefined ? IMP_KERNEL_ARGS : [...IMP_KERNEL_ARGS, "imp.cache=/dev/vdc", `imp.cache.paths=${cachePaths.join(",")}`];
}

export interface BootDeps {
  readonly stateDir: string;
  readonly images: VmImageSource;
  /** Absent: no VM gets a network device. */
  readonly network?: VmNetworkProvider;
  readonly launch: VmLaunchPorts;
  readonly workload: WorkloadPorts;
  readonly clock: Clock;
  readonly timeouts: RuntimeTimeouts;
  readonly faults: FaultPoints;
  /** Names this host in the guest's hello (`imp-agent`, `imp-run`). */
  readonly clientName: string;
  /** Told of each VMM as soon as it runs, before the boot goes on (a stop during boot must reach it). */
  readonly onVmStarted?: (id: string, vm: RunningVm) => void;
  /** The node's cache volumes; absent: no VM gets one (`imp run`). */
  readonly caches?: CacheVolumes;
  /** Told whether a VM asking for a cache clone got one (metrics). */
  readonly onCacheEvent?: (result: "attached" | "unsupported" | "failed") => void;
}

/** What every lifecycle starts from. */
export interface Requested {
  readonly request: VmBootRequest;
  readonly log: Logger;
}

export interface Prepared extends Requested {
  readonly dir: VmDir;
  readonly image: CachedImage;
  readonly disks: VmDisks;
  readonly lease: VmNetworkLease | undefined;
  /** The VM's clone of its cache volume; absent without one, or when it could not be made (the job runs cold). */
  readonly cache: CacheClone | undefined;
  /** A template to be saved, or the snapshot a VM is restored from (snapshot-steps.ts); absent for a boot. */
  readonly memorySnapshot?: VmMemorySnapshot;
}

/** A VMM runs (booted or adopted). */
export interface Launched {
  readonly request: Pick<VmBootRequest, "id" | "name">;
  readonly log: Logger;
  readonly dir: VmDir;
  readonly driver: VmmDriver;
  readonly vm: RunningVm;
  /** This boot's exit record key. */
  readonly exitKey: Buffer;
}

export interface Connected extends Launched {
  readonly client: GuestClient;
}

/** The workload was handed to the guest (or, adopted, found there). */
export interface Delivered extends Connected {
  readonly execId: string;
}

/** prepare: the VM's directory, its image and disks, and its network port. */
export function prepareSteps(deps: BootDeps): Pipeline<Requested, Requested & Omit<Prepared, keyof Requested | "memorySnapshot">, BootStepName> {
  return dirAndImageSteps(deps).then(disksAndNetworkSteps(deps));
}

/** The VM's directory (removed with the VM) and its base image, ensured in the node's cache. */
export function dirAndImageSteps(deps: BootDeps): Pipeline<Requested, Requested & Pick<Prepared, "dir" | "image">, BootStepName> {
  return Pipeline.of<Requested, BootStepName>()
    .step("vm-dir", async (s, ctx) => {
      const dir = VmDir.of(deps.stateDir, s.request.id);
      await mkdir(dir.root, { recursive: true, mode: 0o700 });
      ctx.onCleanup("remove vm dir", () => rm(dir.root, { recursive: true, force: true }));
      return { dir };
    })
    .step("image", async (s, ctx) => ({ image: await deps.images.ensure(s.request.image, ctx.signal) }));
}

/** The VM's disks (a scratch disk already in its directory is kept: a restore's copy), its cache clone and its network port. */
export function disksAndNetworkSteps(deps: BootDeps): Pipeline<Requested & Pick<Prepared, "dir" | "image">, Requested & Pick<Prepared, "dir" | "image" | "disks" | "cache" | "lease">, BootStepName> {
  return Pipeline.of<Requested & Pick<Prepared, "dir" | "image">, BootStepName>()
    .step("disks", async (s, ctx) => {
      await deps.faults.hit("agent.prepare", ctx.signal);
      return { disks: await deps.images.disks(s.dir.root, s.image, s.request.scratchBytes) };
    })
    .step("cache", async (s, ctx) => {
      const cache = await cacheClone(deps, s, ctx.signal);
      const caches = deps.caches;
      const wanted = s.request.cache;
      if (cache !== undefined && caches !== undefined && wanted !== undefined) {
        // Kept past the VM (its directory goes) until the operator's decision on its job settles it.
        ctx.onCleanup("hold cache clone", () =>
          caches.hold(wanted, s.request.id, cache, deps.clock.now()).catch((err: unknown) => {
            s.log.warn({ error: describeError(err) }, "cache clone not held: it is removed with the VM and cannot be promoted");
          }),
        );
      }
      return { cache };
    })
    .step("network", async (s, ctx) => {
      const network = deps.network;
      if (s.request.network === undefined || network === undefined) return { lease: undefined };
      ctx.onCleanup("detach network", () => network.detach(s.request.id));
      return { lease: await network.attach(s.request.id, s.request.network) };
    });
}

/**
 * The VM's clone of its cache volume, in its directory (removed with it). A cache is a speed-up,
 * never a condition: a VMM that cannot attach a clone (Firecracker takes raw files only) or a clone
 * that cannot be made leaves the VM without one, and its job runs cold; only a stop ends the step.
 */
async function cacheClone(deps: BootDeps, s: Requested & Pick<Prepared, "dir">, signal: AbortSignal): Promise<CacheClone | undefined> {
  const wanted = s.request.cache;
  if (wanted === undefined || deps.caches === undefined) return undefined;
  if (s.request.vmm !== "qemu") {
    deps.onCacheEvent?.("unsupported");
    s.log.warn({ vmm: s.request.vmm, volume: wanted.volume }, "cache volume not attached: only QEMU takes a copy-on-write clone; the job runs without its cache");
    return undefined;
  }
  // x86 kernels take 2,048 bytes of command line: the cache's paths, the template's arguments and
  // the driver's own must fit, or the VM runs without its cache rather than fail to start.
  const cmdline = deps.launch.drivers.get(s.request.vmm)?.cmdline({ kernel: s.request.kernel.args, imp: impKernelArgs(wanted.paths), extra: s.request.bootArgs }) ?? "";
  if (cmdline.length > CMDLINE_BUDGET) {
    deps.onCacheEvent?.("failed");
    s.log.warn({ volume: wanted.volume, bytes: cmdline.length }, "cache volume not attached: its paths would not fit on the kernel command line beside the template's arguments; the job runs without its cache");
    return undefined;
  }
  try {
    const clone = await deps.caches.cloneNewest(wanted, s.dir.root, { signal });
    deps.onCacheEvent?.("attached");
    return clone;
  } catch (err) {
    if (signal.aborted) throw err;
    deps.onCacheEvent?.("failed");
    s.log.warn({ volume: wanted.volume, error: describeError(err) }, "cache volume not attached: the clone could not be made; the job runs without its cache");
    return undefined;
  }
}

/** launch: this boot's exit record key, a guest CID, and the VMM started by its driver. */
export function launchSteps(deps: BootDeps): Pipeline<Prepared, Prepared & Omit<Launched, keyof Prepared>, BootStepName> {
  return Pipeline.of<Prepared, BootStepName>().step("vmm", async (s, ctx) => {
    const driver = deps.launch.drivers.get(s.request.vmm);
    if (driver === undefined) throw terminalError("VmmUnavailable", `Cannot boot VM ${s.request.name}: this node has no ${s.request.vmm} driver`);
    // On disk before the VMM starts: an agent that restarts from here on can verify the VM's exit.
    const exitKey = newExitRecordKey();
    await writeFile(s.dir.exitKey(), exitKey, { mode: 0o600 });
    const cid = deps.launch.allocateCid(s.request.id);
    ctx.onCleanup("release cid", () => deps.launch.releaseCid(s.request.id));
    const { kernel } = s.request;
    const spec: VmSpec = {
      name: s.request.name,
      dir: s.dir.vmm(),
      vcpus: s.request.vcpus,
      memoryMiB: s.request.memoryMiB,
      kernel: kernel.kernel,
      ...(kernel.initrd === undefined ? {} : { initrd: kernel.initrd }),
      cmdline: driver.cmdline({ kernel: kernel.args, imp: impKernelArgs(s.cache === undefined ? undefined : s.request.cache?.paths), extra: s.request.bootArgs }),
      drives: [
        { id: "root", path: s.disks.base, readOnly: true, isRoot: true },
        { id: "scratch", path: s.disks.scratch, readOnly: false, isRoot: false },
        // Third, so the guest sees it as /dev/vdc (impKernelArgs); its backing file named here, never read from the clone.
        ...(s.cache === undefined ? [] : [{ id: "cache", path: s.cache.clone, readOnly: false, isRoot: false, format: "qcow2" as const, backing: s.cache.generation }]),
      ],
      ...(s.lease === undefined ? {} : { network: { tap: s.lease.tap, mac: s.lease.mac } }),
      guestCid: cid,
      ...(s.memorySnapshot === undefined ? {} : { memorySnapshot: s.memorySnapshot }),
    };
    const vm = await driver.start(spec, { launcher: deps.launch.launcherFor(s.request, s.dir, driver), clock: deps.clock, logger: s.log }, ctx.signal);
    ctx.onCleanup("stop vmm", async () => {
      await vm.stop(deps.timeouts.stopGraceMs);
    });
    deps.onVmStarted?.(s.request.id, vm);
    return { driver, vm, exitKey };
  });
}

/**
 * connect: the guest channel and the guest agent's hello, within `timeoutMs`. From the hello on
 * the console is the workload's: the VM's fatal-line watch is disarmed.
 */
export function connectSteps(deps: BootDeps, options: { readonly timeoutMs: number; readonly faultPoint: boolean }): Pipeline<Launched, Connected, BootStepName> {
  return Pipeline.of<Launched, BootStepName>().step("guest", async (s, ctx) => {
    if (options.faultPoint) await deps.faults.hit("agent.boot", ctx.signal);
    const client = await connectGuest(s.vm, { timeoutMs: options.timeoutMs, serial: s.vm.guestChannel === "serial", signal: ctx.signal, clientName: deps.clientName });
    ctx.onCleanup("close guest channel", () => client.close());
    s.vm.guestReady();
    return { client };
  });
}

/**
 * configure: hostname, network, entropy and the exit record key, in one idempotent request. A VM
 * restored from a memory snapshot also gets the wall clock and its MAC: it woke with its template's
 * (and the guest reseeds its CRNG from the entropy before anything else reads it).
 */
export function configureSteps(deps: BootDeps): Pipeline<Prepared & Connected, Prepared & Connected & { readonly guestIP: string | undefined }, BootStepName> {
  return Pipeline.of<Prepared & Connected, BootStepName>().step("configure", async (s, ctx) => {
    const restored = s.memorySnapshot?.role === "restore";
    const network = s.lease === undefined ? {} : { network: restored ? { ...s.lease.guest, mac: s.lease.mac } : s.lease.guest };
    await s.client.configure(
      { hostname: s.request.name, entropySeed: randomBytes(64), exitRecordKey: s.exitKey, ...network, ...(restored ? { unixTimeMs: Date.now() } : {}) },
      { timeoutMs: deps.timeouts.requestMs, signal: ctx.signal },
    );
    return { guestIP: s.lease?.guest.address.split("/")[0] };
  });
}

/**
 * setup and exec: waits for the one-time setup where the request needs one (the decision hands it
 * over), then the one Exec under the ambiguous-handoff rule. Only the Exec carries the setup on.
 */
export function workloadSteps(deps: BootDeps): Pipeline<Prepared & Connected, Prepared & Delivered, BootStepName> {
  return Pipeline.of<Prepared & Connected, BootStepName>()
    .step("setup", async (s, ctx) => {
      if (!s.request.requiresSetup) return { setup: undefined };
      const awaitSetup = deps.workload.awaitSetup;
      if (awaitSetup === undefined) throw terminalError("SetupUnavailable", `Cannot start VM ${s.request.name}: it needs a runner setup and nothing here provides one`);
      return { setup: await awaitSetup(s.request.id, ctx.signal) };
    })
    .step("exec", async (s, ctx) => {
      const execId = workloadExecId(s.request.id);
      const w = s.request.workload;
      const env: Record<string, string> = { ...w.env };
      let stdin: Uint8Array | undefined;
      if (s.setup !== undefined && s.request.setupDelivery === "Stdin") {
        stdin = Buffer.from(s.setup, "utf8");
        env[RUNNER_SETUP.deliveryEnvName] = "stdin";
      } else if (s.setup !== undefined) {
        env[RUNNER_SETUP.envName] = s.setup;
        env[RUNNER_SETUP.runnerInputEnvName] = s.setup;
      }
      const onOutput = deps.workload.onOutput;
      const forward = (event: OutputEvent): void => {
        if (event.execId === execId) onOutput?.(event);
      };
      // Subscribed before the Exec leaves: a short workload's output may arrive before its reply.
      if (onOutput !== undefined) s.client.on("output", forward);
      const result = await handOffExec(
        {
          execId,
          argv: w.argv,
          env,
          ...(w.cwd === undefined ? {} : { cwd: w.cwd }),
          ...(w.uid === undefined || w.gid === undefined ? {} : { uid: w.uid, gid: w.gid }),
          shutdownAfterExit: s.driver.shutdownMode,
          ...(stdin === undefined ? {} : { stdin }),
        },
        {
          client: s.client,
          requestTimeoutMs: deps.timeouts.requestMs,
          logger: s.log,
          faults: deps.faults,
          recordSent: async () => {
            ctx.signal.throwIfAborted();
            await deps.workload.recordSent(s.request.id, execId, ctx.signal);
          },
          reconnect: async () => {
            s.client.close();
            return connectGuest(s.vm, { timeoutMs: deps.timeouts.requestMs, serial: s.vm.guestChannel === "serial", clientName: deps.clientName });
          },
        },
      );
      const client = result.client;
      if (client !== s.client) {
        ctx.onCleanup("close guest channel", () => client.close());
        if (onOutput !== undefined) client.on("output", forward);
      }
      if (!result.delivered) throw terminalError("WorkloadStartFailed", `Cannot start the workload: ${result.error}`);
      await deps.faults.hit("agent.running", ctx.signal);
      return { execId, client, setup: undefined };
    });
}

/** What a VM left on the node for a later agent run: its record, its driver and its exit record key. */
export interface AdoptionFacts {
  readonly record: VmRecord;
  readonly driver: VmmDriver;
  readonly exitKey: Buffer | undefined;
}

/** Reads the facts of an earlier boot from `dir`; undefined when there is no VM record (nothing to adopt). */
export async function readAdoptionFacts(dir: VmDir, drivers: ReadonlyMap<string, VmmDriver>): Promise<AdoptionFacts | undefined> {
  const record = await readVmRecord(dir.vmm()).catch(() => undefined);
  if (record === undefined) return undefined;
  const driver = drivers.get(record.driver);
  if (driver === undefined) throw terminalError("VmAdoptFailed", `Cannot adopt VM in ${dir.root}: it was started by ${record.driver}, which this node no longer has`);
  const key = await readFile(dir.exitKey()).catch(() => undefined);
  return { record, driver, exitKey: key?.length === EXIT_RECORD_KEY_BYTES ? key : undefined };
}

/**
 * adopt: a VM an earlier run of this agent booted, from its record and its supervised processes
 * (`facts` and `processes` were read by the caller, who also needs them if adoption fails).
 */
export function adoptSteps(deps: BootDeps, facts: AdoptionFacts, processes: readonly VmmProcess[]): Pipeline<Requested, Launched, BootStepName> {
  return Pipeline.of<Requested, BootStepName>().step("adopt", async (s, ctx) => {
    const dir = VmDir.of(deps.stateDir, s.request.id);
    const { driver, record, exitKey } = facts;
    if (exitKey === undefined) throw terminalError("VmAdoptFailed", `Cannot adopt VM in ${dir.root}: its exit record key is missing`);
    if (driver.adopt === undefined) throw terminalError("VmAdoptFailed", `Cannot adopt VM in ${dir.root}: the ${driver.kind} driver cannot adopt`);
    if (processes.length === 0 || processes.some((p) => !p.running)) throw terminalError("VmAdoptFailed", `Cannot adopt VM in ${dir.root}: its VMM is no longer running`);
    const vm = await driver.adopt(record.spec, processes, { launcher: deps.launch.launcherFor({ id: s.request.id, memoryMiB: record.spec.memoryMiB }, dir, driver), clock: deps.clock, logger: s.log });
    ctx.onCleanup("stop vmm", async () => {
      await vm.stop(deps.timeouts.stopGraceMs);
    });
    return { dir, driver, vm, exitKey };
  });
}

/**
 * follow: the workload of an adopted VM, by its exec id. Nothing is ever sent again: an exec the
 * guest does not know was never received, and a one-time setup is never delivered twice.
 */
export function followSteps(deps: BootDeps): Pipeline<Connected, Delivered, BootStepName> {
  return Pipeline.of<Connected, BootStepName>().step("follow", async (s, ctx) => {
    const execId = workloadExecId(s.request.id);
    try {
      await s.client.execStatus(execId, { timeoutMs: deps.timeouts.requestMs, signal: ctx.signal });
    } catch (err) {
      if (err instanceof ImpError && err.context["guestCode"] === "not_found") {
        throw terminalError("ExecNotReceived", `Cannot follow exec ${execId}: the guest never received it, and an Exec that may carry a one-time setup is never sent twice`, { cause: err });
      }
      throw err;
    }
    return { execId };
  });
}
