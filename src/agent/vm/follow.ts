/**
 * The end of a VM whose workload was delivered (or adopted): the workload's exit from the guest
 * channel; when the channel missed it (lost, or the VMM went first), the exit record the guest
 * agent wrote to the console, verified with the boot's key; else the VMM's exit or a lost channel.
 * Then the guest's own power-off, bounded; a VM that does not go by itself is stopped. Shared by
 * the node agent and `imp run`.
 */
import { VM_REASONS } from "../../api/index.ts";
import { describeError, type Clock, type Logger } from "../../shared/index.ts";
import type { ExecOutcome, GuestClient } from "../guest/index.ts";
import type { Delivered } from "./boot-steps.ts";
import { firstExitRecord } from "../guest/index.ts";
import { connectGuest, isGuestMisbehaviour } from "./guest-connection.ts";
import type { VmOutcome } from "./local-vm.ts";
import { misbehaved, outcomeOfExit } from "./outcome.ts";
import type { RuntimeTimeouts } from "./ports.ts";

export interface FollowOptions {
  readonly clock: Clock;
  readonly timeouts: RuntimeTimeouts;
  readonly clientName: string;
  readonly log: Logger;
  /** Aborts when someone stops the VM; `stopped()` then says with which outcome. */
  readonly signal: AbortSignal;
  readonly stopped: () => VmOutcome | undefined;
  /** Console bytes read when looking for the exit record (the console cap). */
  readonly maxConsoleBytes: number;
  /** Runs once the workload ended, before the power-off wait (the agent's fault point agent.after-exit). */
  readonly afterExit?: () => Promise<void>;
}

/** Waits for the workload to end and the VMM to go (stopping it when it does not). */
export async function followToEnd(s: Delivered, o: FollowOptions): Promise<VmOutcome> {
  const outcome = await orFromRecord(s, o, await workloadEnd(s, o));
  await o.afterExit?.();
  // The guest powers off after reporting the exit; give it a bounded moment, then stop it. A guest
  // that misbehaved gets no moment: it is stopped at once.
  const exited = outcome.reason !== VM_REASONS.GuestMisbehaved && (await Promise.race([s.vm.exited().then(() => true), o.clock.sleep(o.timeouts.powerOffMs).then(() => false)]));
  if (!exited) await s.vm.stop(o.timeouts.stopGraceMs);
  return outcome;
}

/** A VM that went without its exit reaching the channel: its verified exit record, if the guest wrote one, says how the workload ended. */
async function orFromRecord(s: Delivered, o: FollowOptions, outcome: VmOutcome): Promise<VmOutcome> {
  if (outcome.reason !== VM_REASONS.VmmExited && outcome.reason !== VM_REASONS.GuestUnreachable) return outcome;
  if (!(await Promise.race([s.vm.exited().then(() => true), delay(STREAM_DRAIN_MS).then(() => false)]))) return outcome;
  const record = await firstExitRecord(s.driver.consoleLog(s.vm.spec), s.exitKey, s.execId, o.maxConsoleBytes);
  if (record === undefined) return outcome;
  const seen = outcomeOfExit({ execId: record.execId, state: "exited", exitCode: record.exitCode, ...(record.signal === undefined ? {} : { signal: record.signal }) });
  return { ...seen, message: `${seen.message} (from its verified exit record; the guest channel missed the exit)` };
}

async function workloadEnd(s: Delivered, o: FollowOptions): Promise<VmOutcome> {
  const { vm } = s;
  const vmDown = new Promise<"down">((resolve) => {
    if (vm.downSignal.aborted) resolve("down");
    vm.downSignal.addEventListener("abort", () => resolve("down"), { once: true });
  });
  const exit = s.client.waitForExit(s.execId, { signal: o.signal });
  exit.catch(() => undefined); // settled below, whichever way the race goes
  let outcome: ExecOutcome | "down";
  let again: GuestClient | undefined;
  try {
    try {
      outcome = await Promise.race([exit, vmDown]);
      // The VMM went: what its guest wrote before (the exit event of a workload that just ended and
      // powered off) is still in the stream, read before the stream's close. Let it drain, bounded.
      if (outcome === "down") outcome = (await Promise.race([exit.catch(() => undefined), delay(STREAM_DRAIN_MS)])) ?? "down";
    } catch (err) {
      const stop = o.stopped();
      if (stop !== undefined) return stop;
      // A guest that broke the protocol gets no second channel: nothing it says can be trusted.
      if (isGuestMisbehaviour(err) || isGuestMisbehaviour(vm.downSignal.reason)) return misbehaved(vm.downSignal.aborted ? vm.downSignal.reason : err);
      // A VMM that died closes the channel first; its exit follows within moments.
      const vmmGone = await Promise.race([vm.exited().then(() => true), o.clock.sleep(2_000).then(() => false)]);
      if (vmmGone || vm.downSignal.aborted) return { succeeded: false, reason: VM_REASONS.VmmExited, message: describeError(vm.downSignal.reason ?? err) };
      o.log.warn({ error: describeError(err) }, "lost the guest channel while the workload ran");
      // The exit may still be known to the guest: ask once over a fresh channel.
      try {
        again = await connectGuest(vm, { timeoutMs: o.timeouts.requestMs, serial: s.vm.guestChannel === "serial", clientName: o.clientName });
        outcome = await Promise.race([again.waitForExit(s.execId, { signal: o.signal }), vmDown]);
      } catch {
        return o.stopped() ?? { succeeded: false, reason: VM_REASONS.GuestUnreachable, message: `lost the guest channel while the workload ran: ${describeError(err)}` };
      }
    }
  } finally {
    again?.close();
  }
  if (outcome === "down") {
    const stop = o.stopped();
    if (stop !== undefined) return stop;
    if (isGuestMisbehaviour(vm.downSignal.reason)) return misbehaved(vm.downSignal.reason);
    return { succeeded: false, reason: VM_REASONS.VmmExited, message: describeError(vm.downSignal.reason) };
  }
  return outcomeOfExit(outcome);
}

/**
 * How long the guest stream may take to deliver what it holds once the VMM exited: local socket
 * I/O, real time (not the injected clock: nothing here is scheduled by the runtime).
 */
const STREAM_DRAIN_MS = 2_000;

function delay(ms: number): Promise<undefined> {
  return new Promise((resolve) => setTimeout(() => resolve(undefined), ms).unref());
}
