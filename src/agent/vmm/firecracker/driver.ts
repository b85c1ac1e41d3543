import { createConnection } from "node:net";
import { open, rm, stat } from "node:fs/promises";
import {
  assertExecutable,
  classOf,
  describeExit,
  ImpError,
  retryableError,
  runSteps,
  terminalError,
  waitFor,
  type Step,
} from "../../../shared/index.ts";
import type { DriverContext, KernelCmdlineParts, VmmDriver, VmmProcess, VmSpec } from "../types.ts";
import { FirecrackerApi, type FirecrackerInstanceInfo } from "./api-client.ts";
import { actionRequest, assertFirecrackerSpec, configRequests } from "./api-requests.ts";
import { firecrackerCmdline } from "./cmdline.ts";
import { fileTail } from "./file-tail.ts";
import { firecrackerArgv, jailerArgv, jailExists, prepareJail, removeJail, type JailerOptions } from "./jailer.ts";
import { jailedLayout, unjailedLayout, type FirecrackerLayout } from "./layout.ts";
import { FirecrackerVm } from "./vm.ts";
import { removeVmRecord, writeVmRecord } from "../vm-record.ts";

export interface FirecrackerDriverOptions {
  readonly firecrackerBinary: string;
  /** Run each VM under the jailer (production). Without it Firecracker runs as a direct process of the launcher. */
  readonly jailer?: JailerOptions;
  /** Spawn to the API answering `GET /`. */
  readonly apiReadyTimeoutMs?: number;
  /** Each configuration request. */
  readonly requestTimeoutMs?: number;
  /** `InstanceStart` loads the kernel and creates the vCPUs: the slowest request. */
  readonly instanceStartTimeoutMs?: number;
  /** After the stop's grace period: SIGTERM, then SIGKILL after this. */
  readonly killGraceMs?: number;
  /** Console bytes a guest may write before its VM is marked down with `GuestConsoleFlood` (default 16 MiB). */
  readonly maxConsoleBytes?: number | undefined;
}

export function defaultFirecrackerDriverConfig(): Required<Pick<FirecrackerDriverOptions, "apiReadyTimeoutMs" | "requestTimeoutMs" | "instanceStartTimeoutMs" | "killGraceMs">> {
  // Generous: measured figures are milliseconds (docs/firecracker.md), but nodes are shared and noisy.
  return { apiReadyTimeoutMs: 10_000, requestTimeoutMs: 10_000, instanceStartTimeoutMs: 30_000, killGraceMs: 2_000 };
}

interface BootState {
  readonly spec: VmSpec;
  readonly layout: FirecrackerLayout;
  readonly context: DriverContext;
  readonly api: FirecrackerApi;
  process?: VmmProcess;
}

/**
 * The Firecracker VMM driver: one Firecracker process per VM, configured over its API socket, then
 * `InstanceStart`. Boot is a list of named steps; each registers the cleanup of what it acquired at
 * the moment it acquired it, so a failed boot (or an abort) leaves no process, socket or jail behind.
 */
export class FirecrackerDriver implements VmmDriver {
  readonly kind = "firecracker" as const;
  /** Firecracker has no power-off device; a guest reboot (`reboot=k`) ends it. */
  readonly shutdownMode = "reboot" as const;
  readonly guestChannel = "vsock" as const;
  readonly #options: FirecrackerDriverOptions & ReturnType<typeof defaultFirecrackerDriverConfig>;

  constructor(options: FirecrackerDriverOptions) {
    this.#options = { ...defaultFirecrackerDriverConfig(), ...definedOnly(options), firecrackerBinary: options.firecrackerBinary };
  }

  cmdline(parts: KernelCmdlineParts): string {
    return firecrackerCmdline([...parts.kernel, ...parts.imp, ...parts.extra]);
  }

  consoleLog(spec: VmSpec): string {
    return this.layoutOf(spec).host.consoleLog;
  }

  /** Where a VM's files go under this driver's configuration. Pure; exported for tests and sweeps. */
  layoutOf(spec: VmSpec): FirecrackerLayout {
    const jailer = this.#options.jailer;
    return jailer === undefined
      ? unjailedLayout(spec)
      : jailedLayout(spec, { chrootBaseDir: jailer.chrootBaseDir, firecrackerBinary: this.#options.firecrackerBinary });
  }

  async start(spec: VmSpec, context: DriverContext, signal?: AbortSignal): Promise<FirecrackerVm> {
    let layout: FirecrackerLayout;
    try {
      assertFirecrackerSpec(spec);
      layout = this.layoutOf(spec);
    } catch (err) {
      throw terminalError("VmSpecInvalid", `Cannot start VM ${spec.name} under Firecracker: ${(err as Error).message}`, { cause: err, context: { vm: spec.name } });
    }
    const api = new FirecrackerApi(layout.host.apiSocket, { vm: spec.name, timeoutMs: this.#options.requestTimeoutMs });
    const state: BootState = { spec, layout, context, api };
    const run = await runSteps(this.#steps(), state, {
      logger: context.logger,
      ...(signal === undefined ? {} : { signal }),
      onFailure: (step, err) => context.logger.warn({ vm: spec.name, step, errorClass: classOf(err), error: (err as Error).message }, "firecracker boot step failed"),
    });
    const process = state.process;
    if (process === undefined) throw new Error("boot steps finished without a process");
    context.logger.info({ vm: spec.name, pid: process.pid, jailed: layout.jail !== undefined, timings: run.timings }, "firecracker started");
    return new FirecrackerVm({ spec, layout, api, process, boot: run, logger: context.logger, killGraceMs: this.#options.killGraceMs, ...(this.#options.maxConsoleBytes === undefined ? {} : { maxConsoleBytes: this.#options.maxConsoleBytes }) });
  }

  /**
   * Takes over a VM this driver started before the agent restarted, from its still-running
   * Firecracker process (`adoptAllSupervised(spec.dir)`) and the spec of its record (`readVmRecord`).
   * Firecracker's API must answer on its socket with the instance Running. Rejects with a terminal
   * `VmAdoptFailed` otherwise, after stopping what was left and removing its sockets (and jail).
   */
  async adopt(spec: VmSpec, processes: readonly VmmProcess[], context: DriverContext): Promise<FirecrackerVm> {
    let layout: FirecrackerLayout;
    try {
      assertFirecrackerSpec(spec);
      layout = this.layoutOf(spec);
    } catch (err) {
      throw terminalError("VmSpecInvalid", `Cannot adopt VM ${spec.name} under Firecracker: ${(err as Error).message}`, { cause: err, context: { vm: spec.name } });
    }
    const o = this.#options;
    const api = new FirecrackerApi(layout.host.apiSocket, { vm: spec.name, timeoutMs: o.requestTimeoutMs });
    const state: BootState = { spec, layout, context, api };
    const refuse = (why: string, cause?: unknown): never => {
      throw terminalError("VmAdoptFailed", `Cannot adopt VM ${spec.name} under Firecracker: ${why}`, { cause, context: { vm: spec.name, dir: spec.dir } });
    };
    const run = await runSteps<BootState>([
      {
        name: "claim-process",
        run: async (s, c) => {
          // The boot's cleanups, in the boot's order, registered before any check: a refused adoption leaves nothing.
          c.onCleanup("remove sockets", () => removeSockets(s.layout));
          c.onCleanup("remove vm record", () => removeVmRecord(s.spec.dir));
          const jail = s.layout.jail;
          if (jail !== undefined) c.onCleanup("remove jail", () => removeJail(jail));
          const process = processes.find((p) => p.name === "firecracker");
          if (process === undefined) return refuse(`its firecracker process is not among the adopted ones (${processes.map((p) => p.name).join(", ") || "none"})`);
          c.onCleanup("stop firecracker", async () => {
            await process.stop(o.killGraceMs);
          });
          if (!process.running) return refuse(`its firecracker process has exited (${describeExit(await process.exited())})`);
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
            return refuse(`its API on ${s.layout.host.apiSocket} does not answer (${(err as Error).message})`, err);
          }
          if (info.state !== "Running") return refuse(`Firecracker reports state ${JSON.stringify(info.state)}, not Running`);
          // Without its hybrid-vsock socket the guest agent is out of reach for good.
          if ((await stat(s.layout.host.vsockUds).catch(() => undefined))?.isSocket() !== true) return refuse(`its guest channel socket ${s.layout.host.vsockUds} is missing`);
        },
      },
    ], state, {
      logger: context.logger,
      onFailure: (step, err) => context.logger.warn({ vm: spec.name, step, errorClass: classOf(err), error: (err as Error).message }, "firecracker adoption failed"),
    });
    const process = mustHave(state.process);
    context.logger.info({ vm: spec.name, pid: process.pid, jailed: layout.jail !== undefined }, "firecracker adopted");
    return new FirecrackerVm({ spec, layout, api, process, boot: run, logger: context.logger, killGraceMs: o.killGraceMs, ...(o.maxConsoleBytes === undefined ? {} : { maxConsoleBytes: o.maxConsoleBytes }) });
  }

  #steps(): Step<BootState>[] {
    const o = this.#options;
    return [
      {
        name: "check-binaries",
        run: async () => {
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
          const jailer = o.jailer;
          const request = jailer === undefined
            ? { name: "firecracker", binary: o.firecrackerBinary, args: firecrackerArgv(s.layout) }
            : { name: "firecracker", binary: jailer.binary, args: jailerArgv(jailer, o.firecrackerBinary, s.layout, jailer.netnsOf?.(s.spec)) };
          const process = await s.context.launcher.launch({ ...request, stdoutPath: s.layout.host.consoleLog, stderrPath: s.layout.host.stderrLog, cwd: s.spec.dir });
          c.onCleanup("stop firecracker", async () => {
            await process.stop(o.killGraceMs);
          });
          s.process = process;
        },
      },
      {
        name: "wait-api",
        run: async (s, c) => {
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
  }
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

function mustHave<T>(value: T | undefined): T {
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

function definedOnly<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}
