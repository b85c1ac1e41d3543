import { spawn } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import { mkdir, stat } from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { retryableError, terminalError } from "../../shared/index.ts";
import type { LaunchRequest, ProcessLauncher } from "../vmm/types.ts";
import { SupervisorConnection } from "./connection.ts";
import { parseIdentity, SUPERVISOR_FILES, type SupervisorIdentity } from "./records.ts";
import { SupervisedProcess } from "./supervised-process.ts";

/** Where the per-VM cgroups go: `<root>/<memory mount>/<parent>/<vmId>/<process name>`. */
export interface SupervisorCgroupOptions {
  /** Where cgroup filesystems are mounted; default /sys/fs/cgroup. */
  readonly root?: string;
  /** Relative path shared by all of this agent's VMs, e.g. "imp". Outside the agent's own cgroup. */
  readonly parent: string;
}

export interface SupervisorLauncherOptions {
  /** The imp-supervisor binary. */
  readonly supervisorBinary: string;
  readonly vmId: string;
  /** The VM's directory; each process gets `<vmDir>/supervised/<name>/`. */
  readonly vmDir: string;
  /** Omit only where no memory cgroup can be created (then nothing is charged or limited). */
  readonly cgroup?: SupervisorCgroupOptions;
  /** The cgroup memory limit of each process, in bytes; undefined: no limit. See {@link vmMemoryLimitBytes}. */
  readonly memoryLimitBytes?: (request: LaunchRequest) => number | undefined;
  /** How long a SIGTERM sent to the supervisor itself gives the process before SIGKILL; default 10 s. */
  readonly supervisorStopGraceMs?: number;
  /** Bound on the supervisor reporting the process started; default {@link SUPERVISOR_START_TIMEOUT_MS}. */
  readonly startTimeoutMs?: number;
}

/**
 * Guest memory plus what the VMM itself needs beyond it (its driver's `memoryOverheadMiB`: device
 * emulation, its own heap, TCG's code buffer). The limit exists so a runaway VMM is stopped at its own
 * cgroup and not at the node's; when it is reached the VM ends `OOMKilled`.
 */
export function vmMemoryLimitBytes(memoryMiB: number, overheadMiB: number): number {
  return (memoryMiB + overheadMiB) * 1024 * 1024;
}

/**
 * How long a supervisor may take to report its process started: spawn, cgroup set-up, a re-exec and
 * two fsyncs of supervisor.json. On an idle machine that is milliseconds; on a loaded one the fsyncs
 * queue behind other VMs' disk writes. A VM whose supervisor misses the bound fails before it boots
 * (the likeliest end of a supervised boot that never reached Running in a loaded CI run, with 10 s).
 * The bound is there to catch a hung supervisor, not to time a busy one.
 */
export const SUPERVISOR_START_TIMEOUT_MS = 30_000;

/** Unix socket paths are limited to 107 bytes (sun_path). */
const MAX_SOCKET_PATH = 107;
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;

export const supervisionDir = (vmDir: string, name: string): string => join(vmDir, "supervised", name);

/**
 * A {@link ProcessLauncher} that starts each process under its own `imp-supervisor`, detached (own
 * session, no reference from the agent), so the process survives the agent exiting or being killed.
 * Reattach after a restart with {@link adoptSupervised}.
 */
export class SupervisorLauncher implements ProcessLauncher {
  readonly #options: SupervisorLauncherOptions;

  constructor(options: SupervisorLauncherOptions) {
    if (!NAME.test(options.vmId)) throw terminalError("InvalidVmId", `Cannot supervise VM ${options.vmId}: id must be a plain name`);
    this.#options = options;
  }

  async launch(request: LaunchRequest): Promise<SupervisedProcess> {
    const o = this.#options;
    if (!NAME.test(request.name)) throw terminalError("SupervisorStartFailed", `Cannot start ${request.name} under supervisor: name must be a plain name`);
    const dir = supervisionDir(o.vmDir, request.name);
    const socket = join(dir, SUPERVISOR_FILES.socket);
    if (Buffer.byteLength(socket) > MAX_SOCKET_PATH) {
      throw terminalError("SupervisorSocketPathTooLong", `Cannot start ${request.name} under supervisor: socket path ${socket} is longer than ${MAX_SOCKET_PATH} bytes`);
    }
    await mkdir(dir, { recursive: true, mode: 0o700 });
    if (await exists(join(dir, SUPERVISOR_FILES.exit))) {
      throw terminalError("SupervisorExitUncollected", `Cannot start ${request.name} under supervisor: ${dir} holds an exit status nobody collected`);
    }
    const limit = o.memoryLimitBytes?.(request);
    const args = [
      "run", "--dir", dir, "--name", request.name, "--vm-id", o.vmId,
      "--stdout", request.stdoutPath, "--stderr", request.stderrPath, "--ready-fd", "3",
      "--stop-grace", `${o.supervisorStopGraceMs ?? 10_000}ms`,
      ...(request.cwd === undefined ? [] : ["--cwd", request.cwd]),
      ...(o.cgroup === undefined ? [] : ["--cgroup-root", o.cgroup.root ?? "/sys/fs/cgroup", "--cgroup-parent", o.cgroup.parent]),
      ...(limit === undefined ? [] : ["--memory-limit", String(Math.floor(limit))]),
      ...(request.boundFile === undefined ? [] : ["--bound-file", request.boundFile.path, "--bound-bytes", String(Math.floor(request.boundFile.maxBytes))]),
      "--", request.binary, ...request.args,
    ];
    const log = openSync(join(dir, SUPERVISOR_FILES.log), "a", 0o600);
    let child;
    try {
      child = spawn(o.supervisorBinary, args, { detached: true, stdio: ["ignore", log, log, "pipe"] });
    } finally {
      closeSync(log);
    }
    child.unref();
    const readyPipe = child.stdio[3] as Readable;
    let identity: SupervisorIdentity;
    try {
      identity = await readReady(readyPipe, request.name, o.startTimeoutMs ?? SUPERVISOR_START_TIMEOUT_MS, child);
    } catch (err) {
      // A supervisor that reported a failure has already undone everything and exits by itself;
      // one that did not report in time is killed (its process dies with it, PDEATHSIG), and
      // whatever it had created is left to the sweep.
      if ((err as { code?: unknown }).code === "SupervisorStartTimeout") child.kill("SIGKILL");
      throw err;
    } finally {
      readyPipe.destroy();
    }
    let connection: SupervisorConnection | undefined;
    try {
      connection = await SupervisorConnection.connect(identity.socket, 5_000);
    } catch {
      // Already exited and gone: SupervisedProcess reads exit.json.
    }
    return new SupervisedProcess(dir, identity, connection);
  }
}

/** Reads the supervisor's one ready line: the identity, or why the process could not start. */
function readReady(pipe: Readable, name: string, timeoutMs: number, child: { once(e: "error", f: (err: Error) => void): unknown }): Promise<SupervisorIdentity> {
  return new Promise((resolve, reject) => {
    let text = "";
    const timer = setTimeout(() => {
      reject(retryableError("SupervisorStartTimeout", `Cannot start ${name} under supervisor: no ready report within ${timeoutMs} ms`));
    }, timeoutMs);
    const settle = (): void => {
      clearTimeout(timer);
      const line = text.split("\n")[0] ?? "";
      let report: unknown;
      try {
        report = JSON.parse(line);
      } catch {
        reject(terminalError("SupervisorStartFailed", `Cannot start ${name} under supervisor: it exited without a ready report (see ${SUPERVISOR_FILES.log})`));
        return;
      }
      const r = report as { ok?: unknown; error?: unknown; identity?: unknown };
      if (r.ok !== true) {
        reject(terminalError("SupervisorStartFailed", `Cannot start ${name} under supervisor: ${typeof r.error === "string" ? r.error : "no reason given"}`));
        return;
      }
      const identity = parseIdentity(r.identity);
      if (identity === undefined) {
        reject(terminalError("SupervisorStartFailed", `Cannot start ${name} under supervisor: its ready report has no valid identity`));
        return;
      }
      resolve(identity);
    };
    child.once("error", (err) => {
      clearTimeout(timer);
      reject(terminalError("SupervisorStartFailed", `Cannot start ${name} under supervisor: ${err.message}`, { cause: err }));
    });
    pipe.setEncoding("utf8");
    pipe.on("data", (chunk: string) => {
      text += chunk;
      if (text.includes("\n") || text.length > 8192) settle();
    });
    pipe.once("end", settle);
    pipe.once("error", () => settle());
  });
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}
