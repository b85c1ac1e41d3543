import { readFile } from "node:fs/promises";

/**
 * A process named for good: pids are reused by the kernel, so a pid means nothing without the
 * process's start time (field 22 of /proc/<pid>/stat, clock ticks since boot); start times in turn
 * mean nothing across boots, so records also carry the boot id.
 */
export interface ProcessRef {
  readonly pid: number;
  readonly startTime: number;
}

export interface ProcStat {
  /** One-letter state; "Z" is a zombie: exited, not yet reaped. */
  readonly state: string;
  readonly startTime: number;
}

/** Parses /proc/<pid>/stat. The command name may contain spaces and ')', so fields count from the last ')'. */
export function parseProcStat(text: string): ProcStat | undefined {
  const end = text.lastIndexOf(")");
  if (end < 0) return undefined;
  const fields = text.slice(end + 1).trim().split(/\s+/);
  const state = fields[0];
  const start = fields[19];
  if (state === undefined || state.length !== 1 || start === undefined || !/^[0-9]+$/.test(start)) return undefined;
  return { state, startTime: Number(start) };
}

export async function readProcStat(pid: number): Promise<ProcStat | undefined> {
  try {
    return parseProcStat(await readFile(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return undefined;
  }
}

/** What became of a recorded process: still the same live process, gone, or its pid now names another process. */
export type Liveness = "alive" | "gone" | "reused";

export function livenessOf(ref: ProcessRef, stat: ProcStat | undefined): Liveness {
  if (stat === undefined) return "gone";
  if (stat.startTime !== ref.startTime) return "reused";
  return stat.state === "Z" ? "gone" : "alive";
}

export async function liveness(ref: ProcessRef): Promise<Liveness> {
  return livenessOf(ref, await readProcStat(ref.pid));
}

let cachedBootId: string | undefined;

export async function bootId(): Promise<string> {
  cachedBootId ??= (await readFile("/proc/sys/kernel/random/boot_id", "utf8")).trim();
  return cachedBootId;
}

/**
 * SIGKILLs `ref` if it is still that very process. Node has no pidfd, so there is a window of a few
 * microseconds between the check and the kill in which the pid could be reused; that needs a full
 * pid wrap-around within it, which is why the check is made immediately before.
 */
export async function killIfSame(ref: ProcessRef, signal: NodeJS.Signals = "SIGKILL"): Promise<boolean> {
  if ((await liveness(ref)) !== "alive") return false;
  try {
    process.kill(ref.pid, signal);
    return true;
  } catch {
    return false;
  }
}
