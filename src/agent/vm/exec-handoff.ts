/**
 * The one Exec that carries a VM's workload (and, for runner VMs, its one-time setup), under the
 * ambiguous-handoff rule: the exec id is derived from the ImpVM uid; "sent" is recorded (in the API)
 * before the request goes out; if the answer is lost, the agent reconnects and asks the guest for the
 * state of that id — it never sends the Exec again. A guest that cannot be asked makes the VM
 * terminal; it is never booted again with that setup.
 */
import { terminalError, ImpError, NO_FAULTS, withDeadline, type FaultPoints, type Logger } from "../../shared/index.ts";
import type { ExecReply, ExecRequest, ExecStatusReply, GuestClient } from "../guest/index.ts";

/** The exec id of a VM's workload. Stable across agent restarts: the guest recognises a repeat. */
export const workloadExecId = (vmUid: string): string => `imp-run-${vmUid}`;

export type HandoffResult =
  /** The guest started the process (this call or an earlier one). */
  | { readonly delivered: true; readonly state: "running" | "exited"; readonly exitCode?: number; readonly startedByThisCall: boolean }
  /** The guest could not start it (e.g. no such program); the setup reached no process. */
  | { readonly delivered: false; readonly error: string };

export interface HandoffDeps {
  readonly client: GuestClient;
  /** A fresh connection to the guest, bounded; throws when the guest cannot be reached. */
  readonly reconnect: () => Promise<GuestClient>;
  /** Records "sent" durably before the Exec leaves; if this throws, nothing was sent. */
  readonly recordSent: () => Promise<void>;
  readonly logger: Logger;
  readonly requestTimeoutMs: number;
  /** Test fault point agent.exec-sent (docs/failure-proof-points.md); default none. */
  readonly faults?: FaultPoints;
}

export async function handOffExec(request: ExecRequest, deps: HandoffDeps): Promise<HandoffResult & { readonly client: GuestClient }> {
  await deps.recordSent();
  let reply: ExecReply;
  try {
    reply = await deps.client.exec(request, { timeoutMs: deps.requestTimeoutMs });
    // The guest holds the Exec, its acknowledgement is not acted on yet: a fault here is the lost
    // acknowledgement (a hang is bounded like a reply that never comes, then the guest is asked).
    await (deps.faults ?? NO_FAULTS).hit("agent.exec-sent", AbortSignal.timeout(deps.requestTimeoutMs));
  } catch (err) {
    if (isGuestAnswer(err)) {
      // The guest answered and refused the request (bad message, shutting down): nothing started.
      return { delivered: false, error: err.message, client: deps.client };
    }
    // Sent, outcome unknown: ask, never resend.
    deps.logger.warn({ execId: request.execId, error: err instanceof Error ? err.message : String(err) }, "exec answer lost; asking the guest for its state");
    return { ...(await askAfterLoss(request.execId, deps)) };
  }
  return { ...fromState(reply, reply.started), client: deps.client };
}

async function askAfterLoss(execId: string, deps: HandoffDeps): Promise<HandoffResult & { readonly client: GuestClient }> {
  let client: GuestClient;
  try {
    client = await deps.reconnect();
  } catch (err) {
    throw terminalError("GuestUnreachable", `Cannot learn whether exec ${execId} started: the guest cannot be reached after the Exec was sent; the VM is not booted again with this setup`, { cause: err });
  }
  let status: ExecStatusReply;
  try {
    status = await withDeadline(`ask the guest about exec ${execId}`, deps.requestTimeoutMs, (signal) => client.execStatus(execId, { signal }));
  } catch (err) {
    if (isGuestAnswer(err) && err.context["guestCode"] === "not_found") {
      throw terminalError("ExecNotReceived", `Cannot deliver exec ${execId}: the guest never received it, and an Exec that may carry a one-time setup is never sent twice`, { cause: err });
    }
    throw terminalError("GuestUnreachable", `Cannot learn whether exec ${execId} started: the guest did not answer`, { cause: err });
  }
  return { ...fromState(status, false), client };
}

function fromState(state: ExecReply | ExecStatusReply, started: boolean): HandoffResult {
  if (state.state === "failed") return { delivered: false, error: state.error ?? "the guest could not start the process" };
  return { delivered: true, state: state.state, ...(state.exitCode === undefined ? {} : { exitCode: state.exitCode }), startedByThisCall: started };
}

/** An error reply from the guest itself (it answered), as opposed to a broken stream or a timeout (no answer). */
function isGuestAnswer(err: unknown): err is ImpError {
  return err instanceof ImpError && typeof err.context["guestCode"] === "string";
}

