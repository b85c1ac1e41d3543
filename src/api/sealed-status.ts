/**
 * What of an ImpVM's status is sealed material (the one-time setup, the Secret inputs) and how it
 * is removed once the VM ended: the agent does it at release, the operator for the VMs of a lost
 * node. One rule for both, so "nothing sealed outlives the VM's run" (I4) means the same on each side.
 */
import type { ImpVMStatus } from "./schema/impvm.ts";

type SealedParts = { readonly inputs?: unknown; readonly setup?: { readonly sealed?: string | undefined; readonly state: string } | undefined };

/** The status still holds a sealed setup or sealed inputs, or a setup not yet recorded Deleted. */
export function holdsSealed(status: Readonly<SealedParts> | undefined): boolean {
  return status?.inputs !== undefined || (status?.setup !== undefined && (status.setup.sealed !== undefined || status.setup.state !== "Deleted"));
}

/** The status without its sealed material (setup recorded Deleted), or undefined when there is none to remove. */
export function withoutSealed(status: Readonly<ImpVMStatus> | undefined): ImpVMStatus | undefined {
  if (status === undefined || !holdsSealed(status)) return undefined;
  const { inputs: _inputs, ...rest } = status;
  if (status.setup === undefined) return rest;
  const { sealed: _sealed, ...setup } = status.setup;
  return { ...rest, setup: { ...setup, state: "Deleted" } };
}
