/**
 * Firecracker's boot and adoption as named steps (`runSteps`), each registering the cleanup of what
 * it acquired at the moment it acquired it, so a failed boot (or an abort) leaves no process, socket
 * or jail behind; an adoption registers the boot's cleanups in the boot's order.
 */
import { createConnection } from "node:net";
import { open, rm, stat } from "node:fs/promises";
import { assertExecutable, describeExit, ImpError, retryableError, terminalError, waitFor, type Step } from "../../../shared/index.ts";
import { DEFAULT_MAX_CONSOLE_BYTES, supervisedConsoleBound } from "../console-log.ts";
import type { DriverContext, VmmProcess, VmSpec } from "../types.ts";
import { removeVmRecord, writeVmRecord } from "../vm-record.ts";
import type { FirecrackerApi, FirecrackerInstanceInfo } from "./api-client.ts";
import { actionRequest, configRequests, restoreConfigRequests, snapshotLoadRequest } from "./api-requests.ts";
import type { defaultFirecrackerDriverConfig, FirecrackerDriverOptions } from "./driver.ts";
import { fileTail } from "./file-tail.ts";
import { firecrackerArgv, jailerArgv, jailExists, prepareJail, removeJail } from "./jailer.ts";
import type { FirecrackerLayout } from "./layout.ts";

export type ResolvedOptions = FirecrackerDriverOptions & ReturnType<typeof defaultFirecrackerDriverConfig>;

/** What the boot and adoption steps work on, and what they acquire. */
export interface BootState {
  readonly spec: VmSpec;
  readonly layout: FirecrackerLayout;
  readonly context: DriverContext;
  readonly api: FirecrackerApi;
  readonly options: ResolvedOptions;
  /** Set when adopting: the processes an earlier agent run started. */
  readonly adopting?: readonly VmmProcess[];
  process?: VmmProcess;
}

/** The names of Firecracker's boot and adoption steps, as logs and step timings carry them. */
export type FirecrackerStepName = "check-binaries" | "claim-vm-files" | "prepare-jail" | "spawn" | "wait-api" | "configure" | "instance-start" | "configure-logging" | "load-snapshot" | "confirm-running" | "claim-process" | "check-api";

const CONFIGURE_LOGGING: Step<BootState, FirecrackerStepName> = {
  name: "configure-logging",
  run: async (s, c) => {
    for (const request of restoreConfigRequests(s.layout.vmm)) await explainIfExited(s, () => s.api.put(request, { signal: c.signal }));
  },
};

/**
 * What Firecracker v1.12 says when the snapshot's own files are at fault (measured: a truncated or
 * overwritten state fails its CRC64, a memory file shorter than the state's memory cannot be mapped,
 * a state of another version cannot be read). A drive, tap or socket it cannot open is the host's
 * business, not the snapshot's: that error passes through, so a good snapshot is not discarded.
 */
const SNAPSHOT_FILE_FAULT = /Failed to get snapshot state from file|Failed to load guest memory|Invalid snapshot|snapshot version/i;

const LOAD_SNAPSHOT: Step<BootState, FirecrackerStepName> = {
  name: "load-snapshot",
  run: async (s, c) => {
    const snapshot = s.spec.memorySnapshot;
    if (snapshot?.role !== "restore") throw new Error("load-snapshot runs for a restored VM only");
    const request = snapshotLoadRequest({ statePath: snapshot.statePath, memoryFile: snapshot.memoryFile, ...(s.spec.network === undefined ? {} : { tap: s.spec.network.tap }) });
    try {
      await s.api.put(request, { timeoutMs: s.options.instanceStartTimeoutMs, signal: c.signal });
    } catch (err) {
      // Firecracker answers a refused load with a 400 and then exits: its answer says why, so it is read before its exit.
      const fault = err instanceof ImpError ? err.context.faultMessage : undefined;
      // A terminal answer only: a host short of memory for the mapping (retryable) is not the snapshot's fault.
      if (typeof fault === "string" && SNAPSHOT_FILE_FAULT.test(fault) && err instanceof ImpError && err.errorClass === "terminal") {
        throw terminalError("SnapshotLoadFailed", `Cannot restore VM ${s.spec.name} from ${snapshot.statePath}: ${err instanceof Error ? err.message : String(err)}`, { cause: err, context: { vm: s.spec.name, statePath: snapshot.statePath } });
      }
      await explainIfExited(s, () => Promise.reject(err));
    }
  },
};

export const BOOT_STEPS: readonly Step<BootState, FirecrackerStepName>[] = [
  {
    name: "check-binaries",
    run: async ({ options: o }) => {
      await assertExecutable("firecracker", o.firecrackerBinary, "FirecrackerStartFailed");
      if (o.jailer !== undefined) await assertExecutable("jailer", o.jailer.binary, "FirecrackerStartFailed");
    },
  },
  {
    name: "claim-vm-files",
    run: async (s, c) => {
      // A socket that still answers belongs to a live VMM: never take it over.
      if (await socketAnswers(s.layout.host.apiSocket)) {
        throw terminalError("VmAlreadyRunning", `Cannot start VM ${s.spec.name}: a VMM already answers on ${s.layout.host.apiSocket}`, { context: { vm: s.spec.name } });
      }
      // Registered before anything creates the sockets, so it runs last: after the process is gone.
      c.onCleanup("remove sockets", () => removeSockets(s.layout));
      await removeSockets(s.layout);
      // Firecracker opens its log and metrics files without creating them.
      await touch(s.layout.host.logFile);
      await touch(s.layout.host.metricsFile);
      // What a restarted agent needs to adopt this VM; gone with the VM.
      c.onCleanup("remove vm record", () => removeVmRecord(s.spec.dir));
      await writeVmRecord(s.spec.dir, { driver: "firecracker", channel: "vsock", spec: s.spec });
    },
  },
  {
    name: "prepare-jail",
    run: async (s, c) => {
      const o = s.options;
      const jail = s.layout.jail;
      if (jail === undefined || o.jailer === undefined) return;
      if (await jailExists(jail)) await removeJail(jail); // left by a crash; the live case was refused above
      c.onCleanup("remove jail", () => removeJail(jail));
      await prepareJail(jail, o.jailer, s.spec.name);
    },
  },
  {
    name: "spawn",
    run: async (s, c) => {
      const o = s.options;
      const jailer = o.jailer;
      const request = jailer === undefined
        ? { name: "firecracker", binary: o.firecrackerBinary, args: firecrackerArgv(s.layout) }
        : { name: "firecracker", binary: jailer.binary, args: jailerArgv(jailer, o.firecrackerBinary, s.layout, jailer.netnsOf?.(s.spec)) };
      const process = await s.context.launcher.launch({ ...request, stdoutPath: s.layout.host.consoleLog, stderrPath: s.layout.host.stderrLog, cwd: s.spec.dir, boundFile: { path: s.layout.host.consoleLog, maxBytes: supervisedConsoleBound(o.maxConsoleBytes ?? DEFAULT_MAX_CONSOLE_BYTES) } });
      c.onCleanup("stop firecracker", async () => {
        await process.stop(o.killGraceMs);
      });
      s.process = process;
    },
  },
  {
    name: "wait-api",
    run: async (s, c) => {
      const o = s.options;
      const process = mustHave(s.process);
      await waitFor(
        `reach the Firecracker API of VM ${s.spec.name}`,
        async () => {
          if (!process.running) throw await exitedError(s, process, "before its API answered");
          return s.api.describeInstance({ timeoutMs: 1_000, signal: c.signal });
        },
        { timeoutMs: o.apiReadyTimeoutMs, intervalMs: 5, signal: c.signal },
      ).catch(async (err: unknown) => {
        if (!process.running) throw await exitedError(s, process, "before its API answered");
        if (err instanceof ImpError && err.code === "Timeout") {
          throw retryableError("FirecrackerStartFailed", `Cannot start VM ${s.spec.name}: Firecracker's API did not answer within ${o.apiReadyTimeoutMs} ms`, { cause: err, context: { vm: s.spec.name } });
        }
        throw err;
      });
    },
  },
  {
    name: "configure",
    run: async (s, c) => {
      for (const request of configRequests(s.spec, s.layout.vmm)) {
        await explainIfExited(s, () => s.api.put(request, { signal: c.signal }));
      }
    },
  },
  {
    name: "instance-start",
    run: async (s, c) => {
      const o = s.options;
      await explainIfExited(s, () => s.api.put(actionRequest("InstanceStart"), { timeoutMs: o.instanceStartTimeoutMs, signal: c.signal }));
    },
  },
  {
    name: "confirm-running",
    run: async (s, c) => {
      const info = await explainIfExited(s, () => s.api.describeInstance({ signal: c.signal }));
      if (info.state !== "Running") {
        throw retryableError("FirecrackerStartFailed", `Cannot start VM ${s.spec.name}: after InstanceStart Firecracker reports state ${JSON.stringify(info.state)}`, { context: { vm: s.spec.name } });
      }
    },
  },
];

/**
 * A restored VM: the boot's steps, with its configuration cut to what Firecracker takes before a
 * snapshot (logger, metrics) and `InstanceStart` replaced by loading the snapshot and resuming.
 */
export const RESTORE_STEPS: readonly Step<BootState, FirecrackerStepName>[] = BOOT_STEPS.map((step) => {
  if (step.name === "configure") return CONFIGURE_LOGGING;
  if (step.name === "instance-start") return LOAD_SNAPSHOT;
  return step;
});

/**
 * Adoption of a VM an earlier agent run started: the boot's cleanups registered in the boot's order
 * before any check, then Firecracker's API must answer with the instance Running and its guest
 * channel's socket must exist.
 */
export const ADOPT_STEPS: readonly Step<BootState, FirecrackerStepName>[] = [
  {
    name: "claim-process",
    run: async (s, c) => {
      // The boot's cleanups, in the boot's order, registered before any check: a refused adoption leaves nothing.
      c.onCleanup("remove sockets", () => removeSockets(s.layout));
      c.onCleanup("remove vm record", () => removeVmRecord(s.spec.dir));
      const jail = s.layout.jail;
      if (jail !== undefined) c.onCleanup("remove jail", () => removeJail(jail));
      const processes = s.adopting ?? [];
      const process = processes.find((p) => p.name === "firecracker");
      if (process === undefined) return refuse(s, `its firecracker process is not among the adopted ones (${processes.map((p) => p.name).join(", ") || "none"})`);
      c.onCleanup("stop firecracker", async () => {
        await process.stop(s.options.killGraceMs);
      });
      if (!process.running) return refuse(s, `its firecracker process has exited (${describeExit(await process.exited())})`);
      s.process = process;
    },
  },
  {
    name: "check-api",
    run: async (s, c) => {
      let info: FirecrackerInstanceInfo;
      try {
        info = await s.api.describeInstance({ signal: c.signal });
      } catch (err) {
        return refuse(s, `its API on ${s.layout.host.apiSocket} does not answer (${(err as Error).message})`, err);
      }
      if (info.state !== "Running") return refuse(s, `Firecracker reports state ${JSON.stringify(info.state)}, not Running`);
      // Without its hybrid-vsock socket the guest agent is out of reach for good.
      if ((await stat(s.layout.host.vsockUds).catch(() => undefined))?.isSocket() !== true) return refuse(s, `its guest channel socket ${s.layout.host.vsockUds} is missing`);
    },
  },
];

function refuse(s: BootState, why: string, cause?: unknown): never {
  throw terminalError("VmAdoptFailed", `Cannot adopt VM ${s.spec.name} under Firecracker: ${why}`, { cause, context: { vm: s.spec.name, dir: s.spec.dir } });
}

/** Runs an API call; if Firecracker died meanwhile, says that instead of "connection refused". */
async function explainIfExited<T>(s: BootState, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    const process = s.process;
    if (process !== undefined && !(err instanceof ImpError && err.code === "KvmUnavailable")) {
      const gone = await Promise.race([process.exited().then(() => true), new Promise<false>((r) => setTimeout(() => r(false), 200))]);
      if (gone) throw await exitedError(s, process, "during configuration", err);
    }
    throw err;
  }
}

async function exitedError(s: BootState, process: VmmProcess, when: string, cause?: unknown): Promise<ImpError> {
  const exit = await process.exited();
  const said = (await fileTail(s.layout.host.stderrLog)) || (await fileTail(s.layout.host.consoleLog));
  return terminalError(
    "FirecrackerStartFailed",
    `Cannot start VM ${s.spec.name}: Firecracker exited ${when} (${describeExit(exit)})${said === "" ? "" : `; it said: ${said}`}`,
    { cause, context: { vm: s.spec.name, stderrLog: s.layout.host.stderrLog, consoleLog: s.layout.host.consoleLog } },
  );
}

export function mustHave<T>(value: T | undefined): T {
  if (value === undefined) throw new Error("boot step ran out of order");
  return value;
}

async function removeSockets(layout: FirecrackerLayout): Promise<void> {
  await rm(layout.host.apiSocket, { force: true });
  await rm(layout.host.vsockUds, { force: true });
}

async function touch(path: string): Promise<void> {
  const handle = await open(path, "a", 0o600);
  await handle.close();
}

/** Whether something accepts connections on the Unix socket at `path` (bounded: 1 s). */
async function socketAnswers(path: string): Promise<boolean> {
  if ((await stat(path).catch(() => undefined))?.isSocket() !== true) return false;
  return new Promise((resolve) => {
    const socket = createConnection({ path });
    const done = (answers: boolean): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(answers);
    };
    const timer = setTimeout(() => done(false), 1_000);
    socket.once("connect", () => done(true));
    socket.once("error", () => done(false));
  });
}
