/**
 * An exclusive lock across processes on one file, held by a `flock(1)` child process: the kernel
 * drops an flock when its holder dies, so a crashed builder never leaves a stale lock behind. The
 * child keeps the lock while its stdin is open; our death closes the pipe, ending the child.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { retryableError } from "../../../shared/index.ts";

export interface HeldLock {
  /** Releases the lock; safe to call twice. */
  release(): Promise<void>;
}

/** Waits up to `timeoutMs` for the lock on `path` (created if missing). Rejects with `LockTimeout`. */
export async function acquireFileLock(path: string, timeoutMs: number, signal?: AbortSignal): Promise<HeldLock> {
  const child = spawn("flock", ["-x", "-w", String(Math.max(timeoutMs / 1000, 0.001)), path, "sh", "-c", "echo locked; exec cat >/dev/null"], {
    stdio: ["pipe", "pipe", "pipe"],
    ...(signal === undefined ? {} : { signal }),
  });
  await new Promise<void>((resolve, reject) => {
    let stderr = "";
    child.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    child.stdout?.once("data", () => resolve());
    child.once("error", reject);
    child.once("close", (code) => reject(retryableError("LockTimeout", `Cannot lock ${path}: not free within ${timeoutMs} ms (flock exited ${code}) ${stderr.trim()}`, { context: { path } })));
  });
  return { release: () => releaseChild(child) };
}

async function releaseChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const closed = new Promise<void>((resolve) => child.once("close", () => resolve()));
  child.stdin?.end();
  await closed;
}
