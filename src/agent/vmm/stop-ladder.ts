/**
 * How every driver stops a VM, as one ladder: the driver's graceful request (QEMU: SIGTERM, which it
 * treats as a power button; Firecracker: SendCtrlAltDel, to which a `reboot=k` guest answers by
 * rebooting, which ends Firecracker), a wait of the grace period for the VMM to exit, then the VMM
 * process's own stop (SIGTERM, SIGKILL after the kill grace). The report says which rung ended it.
 */
import type { VmExit, VmmProcess } from "./types.ts";

/** The grace period every VM gets between the graceful request and the kill, unless its owner gives another. */
export const VM_STOP_GRACE_MS = 5_000;

export type StopRung = "already-exited" | "graceful" | "killed";

export interface VmStopReport {
  /** Which rung ended the VMM. */
  readonly rung: StopRung;
  /** From the stop to the VMM's exit. */
  readonly exitMs: number;
  /** From the kill rung to the exit; 0 when an earlier rung ended it. */
  readonly killMs: number;
  /** Freeing what the driver created after the exit (sockets, helper processes, the jail). */
  readonly cleanupMs: number;
}

export interface StopLadderOptions {
  readonly process: VmmProcess;
  /** The graceful request; a failure is not fatal (the kill rung follows). */
  readonly graceful: (deadline: AbortSignal) => Promise<void>;
  readonly graceMs: number;
  /** The kill rung's own SIGTERM → SIGKILL grace. */
  readonly killGraceMs: number;
  /** Frees what the driver created; runs after the exit whichever rung ended it. */
  readonly cleanup: () => Promise<void>;
  /** Told when the graceful request failed. */
  readonly onGracefulFailed?: (err: unknown) => void;
}

export async function climbStopLadder(o: StopLadderOptions): Promise<{ readonly exit: VmExit; readonly report: VmStopReport }> {
  const started = performance.now();
  let rung: StopRung = "already-exited";
  let killMs = 0;
  if (o.process.running) {
    rung = "graceful";
    const deadline = AbortSignal.timeout(Math.max(1, o.graceMs));
    await o.graceful(deadline).catch((err: unknown) => o.onGracefulFailed?.(err));
    const exitedInTime = await Promise.race([
      o.process.exited().then(() => true),
      new Promise<false>((resolve) => {
        if (deadline.aborted) resolve(false);
        deadline.addEventListener("abort", () => resolve(false), { once: true });
      }),
    ]);
    if (!exitedInTime) {
      rung = "killed";
      const killed = performance.now();
      await o.process.stop(o.killGraceMs);
      killMs = performance.now() - killed;
    }
  }
  const exit = await o.process.exited();
  const exitMs = performance.now() - started;
  await o.cleanup();
  return { exit, report: { rung, exitMs, killMs, cleanupMs: performance.now() - started - exitMs } };
}
