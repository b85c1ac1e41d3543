/**
 * What an agent does when its ImpNode says Imp is being uninstalled (the chart's pre-delete hook
 * writes `imp.dev/decommission`). Pure: the request, when the agent started and how many VMs the
 * node still holds decide it.
 *
 * A request stamped before this agent started is left over from an earlier uninstall that did not
 * finish (the hook was killed, or timed out before it could delete the ImpNode): acting on it would
 * wipe a fresh install's node, so it is ignored. A node with VMs waits: their directories, taps
 * and cgroups are torn down by the VMs' own teardown, and the state directory holds their disks.
 */
import { ANNOTATIONS } from "../../api/index.ts";

export interface DecommissionRequest {
  /** When the uninstall asked, in ms (from the annotation's RFC 3339 value). */
  readonly requestedAtMs: number;
  /** Keep the state directory (image cache, setup key) for a later install. */
  readonly keepState: boolean;
}

export type DecommissionDecision =
  | { readonly kind: "ignore"; readonly why: string }
  | { readonly kind: "wait"; readonly vms: number }
  | { readonly kind: "retire"; readonly wipeState: boolean };

/** The request an ImpNode's annotations carry; undefined when there is none or its time is unreadable. */
export function decommissionRequestOf(annotations: Readonly<Record<string, string>> | undefined): DecommissionRequest | undefined {
  const at = annotations?.[ANNOTATIONS.decommission];
  if (at === undefined) return undefined;
  const requestedAtMs = Date.parse(at);
  if (!Number.isFinite(requestedAtMs)) return undefined;
  return { requestedAtMs, keepState: annotations?.[ANNOTATIONS.decommissionKeepState] === "true" };
}

export function decideDecommission(input: { readonly request: DecommissionRequest; readonly agentStartedAtMs: number; readonly vmsOnNode: number }): DecommissionDecision {
  // Whole seconds on the annotation: a request in the agent's first second still counts.
  if (input.request.requestedAtMs < Math.floor(input.agentStartedAtMs / 1000) * 1000) {
    return { kind: "ignore", why: `asked at ${new Date(input.request.requestedAtMs).toISOString()}, before this agent started: left over from an earlier uninstall` };
  }
  if (input.vmsOnNode > 0) return { kind: "wait", vms: input.vmsOnNode };
  return { kind: "retire", wipeState: !input.request.keepState };
}
