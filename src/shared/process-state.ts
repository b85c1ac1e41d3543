/**
 * Whether a process id names a process, asked with signal 0 (which delivers nothing). The one place
 * that reads kill(2)'s answer, because its two errors mean opposite things to a caller:
 * - ESRCH: no such process: `gone`;
 * - EPERM: a process exists that this one may not signal (another user's, e.g. a pid reused by
 *   someone else): `foreign`. It is alive, but it is not one this process started.
 * A caller that protects files of a live writer treats `foreign` as alive (`!== "gone"`); one that
 * manages its own children (the dev cluster) treats only `alive` as its own.
 */
export type ProcessState = "alive" | "foreign" | "gone";

export function processState(pid: number): ProcessState {
  // kill(0 or negative) addresses process groups, not the process a caller means.
  if (!Number.isInteger(pid) || pid <= 0) return "gone";
  try {
    process.kill(pid, 0);
    return "alive";
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM" ? "foreign" : "gone";
  }
}
