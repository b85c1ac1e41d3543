/**
 * The steps of memory snapshots (docs/snapshots.md), composed in `lifecycle.ts` with the boot's own:
 *
 *   template  vm-dir → image → snapshot(template) → disks → network → vmm → guest → warm-up → save
 *   restore   vm-dir → image → snapshot(restore) → disks → network → vmm → guest → configure → setup → exec
 *
 * A template is a VM of the job VM's very machine (image, kernel, command line, shape, devices) that
 * boots to a ready guest agent and is saved at once: it never gets a configure, a setup or a job, and
 * its network port admits nothing. A restored VM gets hard links to the snapshot's RAM file and
 * state (eviction cannot pull them from under it) and its own copy of the template's scratch disk,
 * the disk the guest's memory remembers; its configure then gives it its own entropy, clock, MAC,
 * address and hostname before the setup is sent. Where the VMM maps the RAM file read-only
 * (Firecracker) the VM keeps the link and every restore shares the one file. A job VM never waits for a template: without one
 * the `snapshot` step fails with `SnapshotMissing` and the runtime boots it.
 */
import { execFile } from "node:child_process";
import { rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { type ImpError, retryableError, terminalError } from "../../shared/index.ts";
import { fileDigestOf, type CachedImage } from "../image/cache/index.ts";
import { SCRATCH_DISK } from "../image/disks/index.ts";
import { snapshotKey, type SnapshotFiles, type SnapshotStore, type TemplateSnapshot } from "../snapshot/index.ts";
import type { OutputEvent } from "../guest/index.ts";
import type { VmmDriver } from "../vmm/index.ts";
import { IMP_KERNEL_ARGS, type BootDeps, type Connected, type Prepared, type Requested } from "./boot-steps.ts";
import type { BootStepName } from "./boot-steps.ts";
import { Pipeline } from "./pipeline.ts";
import { DEFAULT_WORKLOAD_PATH, type VmBootRequest } from "./ports.ts";

const run = promisify(execFile);

/** How long saving a template may take (pause, device state, QEMU's exit). */
const SAVE_TIMEOUT_MS = 60_000;

export interface SnapshotDeps {
  readonly store: SnapshotStore;
}

/** Kernel and initrd digests, by path, size and mtime: read once per file version, not per VM. */
const digests = new Map<string, { readonly version: string; readonly digest: string }>();

async function cachedDigest(path: string): Promise<string> {
  const st = await stat(path);
  const version = `${st.size}:${st.mtimeMs}`;
  const known = digests.get(path);
  if (known?.version === version) return known.digest;
  const digest = await fileDigestOf(path);
  digests.set(path, { version, digest });
  return digest;
}

/** The snapshot key of a VM of `request` on `driver` from `image` (snapshot-key.ts says what goes in). */
export async function snapshotKeyOf(request: VmBootRequest, image: CachedImage, driver: VmmDriver): Promise<string> {
  const { kernel } = request;
  return snapshotKey({
    imageKey: image.key,
    kernelDigest: await cachedDigest(kernel.kernel),
    ...(kernel.initrd === undefined ? {} : { initrdDigest: await cachedDigest(kernel.initrd) }),
    cmdline: driver.cmdline({ kernel: kernel.args, imp: IMP_KERNEL_ARGS, extra: request.bootArgs }),
    vcpus: request.vcpus,
    memoryMiB: request.memoryMiB,
    scratchBytes: request.scratchBytes,
    network: request.network !== undefined,
    vmm: driver.snapshotIdentity === undefined ? driver.kind : await driver.snapshotIdentity(),
  });
}

/** The id of the template VM of `key` (its VM directory, network port and CID). */
export function templateVmId(key: string): string {
  return `tpl-${key.slice(0, 24)}`;
}

/**
 * The request a template of `request` boots from: the same machine, no workload, no setup, and a
 * network port (the restored VMs need the same devices) that lets nothing out.
 */
export function templateRequestOf(request: VmBootRequest, key: string): VmBootRequest {
  const id = templateVmId(key);
  return {
    id,
    name: id,
    vmm: request.vmm,
    vcpus: request.vcpus,
    memoryMiB: request.memoryMiB,
    scratchBytes: request.scratchBytes,
    image: request.image,
    kernel: request.kernel,
    bootArgs: request.bootArgs,
    ...(request.network === undefined ? {} : { network: { egress: "restricted", allowedCIDRs: [] } }),
    requiresSetup: false,
    workload: { argv: [], env: {} },
  };
}

/** What a restore tells its runtime: a snapshot there is not (yet), or the one it restores from. */
export interface RestoreEvents {
  missing(request: VmBootRequest, key: string, why: string): void;
  found(snapshot: TemplateSnapshot): void;
}

/** A job VM's step: the verified snapshot it restores from, linked into its directory with its own scratch copy. */
export function restoreSnapshotSteps(deps: BootDeps, snapshots: SnapshotDeps, events: RestoreEvents): Pipeline<Requested & Pick<Prepared, "dir" | "image">, Requested & Pick<Prepared, "dir" | "image" | "memorySnapshot"> & { readonly snapshot: TemplateSnapshot }, BootStepName> {
  return Pipeline.of<Requested & Pick<Prepared, "dir" | "image">, BootStepName>().step("snapshot", async (s, ctx) => {
    await deps.faults.hit("agent.restore", ctx.signal);
    const driver = deps.launch.drivers.get(s.request.vmm);
    if (driver?.memorySnapshots !== true) throw terminalError("SnapshotUnsupported", `Cannot restore VM ${s.request.name}: the ${s.request.vmm} driver cannot restore memory snapshots here`);
    const key = await snapshotKeyOf(s.request, s.image, driver);
    const result = await snapshots.store.find(key);
    if (result.found === undefined) {
      const why = result.discarded === undefined ? "this node has none yet" : `this node's was discarded: ${result.discarded}`;
      events.missing(s.request, key, why);
      throw retryableError("SnapshotMissing", `Cannot restore VM ${s.request.name} from a memory snapshot: ${why}; it boots instead`, { context: { key } });
    }
    const snapshot = result.found;
    events.found(snapshot);
    const links = await snapshots.store.linkInto(snapshot, s.dir.root);
    // This VM's own copies (sparse, reflinked where the filesystem can) of the disk the guest's
    // memory remembers and, unless its VMM opens it read-only, of the RAM file: QEMU 7.2 opens a RAM
    // file read-write even when it maps it privately, so a job that took over its QEMU could write a
    // file it shared with other VMs; its own copy it may. The disks step keeps a scratch disk it
    // finds in place.
    let memoryFile = links.memoryFile;
    if (driver.restoreMapsMemoryReadOnly !== true) {
      memoryFile = join(s.dir.root, "memory");
      await copySparse(links.memoryFile, memoryFile, ctx.signal);
      await rm(links.memoryFile, { force: true });
    }
    await copySparse(links.scratch, join(s.dir.root, SCRATCH_DISK), ctx.signal);
    await rm(links.scratch, { force: true });
    return { snapshot, memorySnapshot: { role: "restore" as const, memoryFile, statePath: links.statePath } };
  });
}

/** How long copying a snapshot's RAM file or disk may take (reading at least ~20 MiB/s of a 1 GiB file). */
const COPY_TIMEOUT_MS = 60_000;

async function copySparse(from: string, to: string, signal: AbortSignal): Promise<void> {
  await run("cp", ["--sparse=always", "--reflink=auto", from, to], { signal, timeout: COPY_TIMEOUT_MS }).catch((err: unknown) => {
    throw retryableError("SnapshotUnreadable", `Cannot copy memory snapshot file ${from}: ${(err as Error).message}`, { cause: err });
  });
}

/** A template's step: its RAM goes to the snapshot's file, written through. */
export function templateSnapshotSteps(deps: BootDeps, files: SnapshotFiles): Pipeline<Requested & Pick<Prepared, "dir" | "image">, Requested & Pick<Prepared, "dir" | "image" | "memorySnapshot">, BootStepName> {
  return Pipeline.of<Requested & Pick<Prepared, "dir" | "image">, BootStepName>().step("snapshot", async (_s, ctx) => {
    await deps.faults.hit("agent.template", ctx.signal);
    return { memorySnapshot: { role: "template" as const, memoryFile: files.memoryFile } };
  });
}

/**
 * Where an image says what its template starts before the save: an executable the template runs
 * as root, to its exit, with no network, setup or job (the Docker runner image starts dockerd
 * there, so that a restored VM finds the daemon answering instead of waiting ~12 s for it under
 * emulation). An image owns it because only the image knows what its userland may share across
 * clones (docs/snapshots.md: what clones share).
 */
export const TEMPLATE_WARM_UP = "/etc/imp/template-warm-up";
/** The warm-up's exec id in the template's guest. */
const WARM_UP_EXEC_ID = "imp-template-warm-up";
/** How long a warm-up may run: dockerd took 12 s to answer under TCG with the machine loaded; a hang must still end the build. */
export const WARM_UP_TIMEOUT_MS = 180_000;

/** How much of the warm-up's output (its last bytes, both streams) a failure reports: the guest's words for why. */
const WARM_UP_TAIL_BYTES = 4096;

/**
 * warm-up: runs the image's TEMPLATE_WARM_UP to its exit, when the image has one. The guest's own
 * answer for a program that is not there (`fork/exec <path>: no such file or directory`) means the
 * image has none — which is also what a dangling link or a missing `#!` interpreter look like from
 * outside, so the skip is logged with the guest's words. Any other refusal, an exit other than 0,
 * or no exit within WARM_UP_TIMEOUT_MS fails the build (`TemplateWarmUpFailed`, with the last of the
 * program's output), which the node retries later while the class's VMs boot.
 */
export function warmUpSteps(deps: BootDeps): Pipeline<Prepared & Connected, Prepared & Connected & { readonly warmUpMs: number | undefined }, BootStepName> {
  return Pipeline.of<Prepared & Connected, BootStepName>().step("warm-up", async (s, ctx) => {
    const started = performance.now();
    let tail = Buffer.alloc(0);
    const keep = (event: OutputEvent): void => {
      if (event.execId !== WARM_UP_EXEC_ID) return;
      tail = Buffer.concat([tail, Buffer.from(event.data, "base64")]).subarray(-WARM_UP_TAIL_BYTES);
    };
    const said = (): string => (tail.length === 0 ? "it wrote nothing" : `its last output: ${tail.toString("utf8").trim()}`);
    const fail = (why: string, cause?: unknown): ImpError =>
      terminalError("TemplateWarmUpFailed", `Cannot warm up template ${s.request.name}: ${TEMPLATE_WARM_UP} ${why}; ${said()}`, cause === undefined ? {} : { cause });
    // Subscribed before the Exec leaves: a short warm-up's output may arrive before its reply.
    s.client.on("output", keep);
    try {
      const reply = await s.client.exec({ execId: WARM_UP_EXEC_ID, argv: [TEMPLATE_WARM_UP], env: { PATH: DEFAULT_WORKLOAD_PATH } }, { timeoutMs: deps.timeouts.requestMs, signal: ctx.signal });
      if (reply.state === "failed") {
        if (reply.error === `fork/exec ${TEMPLATE_WARM_UP}: no such file or directory`) {
          s.log.info({ guest: reply.error }, `the image has no ${TEMPLATE_WARM_UP}; the template is saved as it booted`);
          return { warmUpMs: undefined };
        }
        throw fail(`could not be started: ${reply.error ?? "no reason given"}`);
      }
      const timeout = AbortSignal.timeout(WARM_UP_TIMEOUT_MS);
      const outcome = await s.client.waitForExit(WARM_UP_EXEC_ID, { signal: AbortSignal.any([ctx.signal, timeout]) }).catch((err: unknown) => {
        if (ctx.signal.aborted) throw ctx.signal.reason ?? err;
        if (timeout.aborted) throw fail(`did not exit within ${WARM_UP_TIMEOUT_MS / 1000} s`, err);
        throw err; // the channel closed or the guest stopped answering: its own error says which
      });
      if (outcome.state !== "exited" || outcome.exitCode !== 0) {
        throw fail(outcome.state === "exited" ? `ended with exit code ${String(outcome.exitCode)}${outcome.signal === undefined ? "" : ` (signal ${outcome.signal})`}` : `ended unstarted: ${outcome.error ?? "?"}`);
      }
      return { warmUpMs: Math.round(performance.now() - started) };
    } finally {
      s.client.off("output", keep);
    }
  });
}

/** save: the template, paused with a ready guest agent and nothing sent, saved; its scratch disk moved into the snapshot. */
export function saveSteps(deps: BootDeps, files: SnapshotFiles): Pipeline<Prepared & Connected, Prepared & Connected & { readonly saveMs: number }, BootStepName> {
  return Pipeline.of<Prepared & Connected, BootStepName>().step("save", async (s, ctx) => {
    if (s.vm.saveSnapshot === undefined) throw terminalError("SnapshotUnsupported", `Cannot save template ${s.request.name}: its VMM cannot save memory snapshots`);
    // The template's channel closes before the pause: no host connection is in the snapshot.
    s.client.close();
    const { ms } = await s.vm.saveSnapshot(files.statePath, { timeoutMs: SAVE_TIMEOUT_MS });
    // The RAM file and the device state are written, the snapshot not yet published.
    await deps.faults.hit("agent.snapshot-save", ctx.signal);
    await rename(s.disks.scratch, files.scratch);
    return { saveMs: ms };
  });
}
