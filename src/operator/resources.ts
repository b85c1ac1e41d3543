/**
 * The kinds the operator reads and writes, as REST descriptors, and the few core shapes it needs
 * (Secrets). One place, so every controller of the operator addresses the same resources.
 */
import type { KubeObject } from "../kube/index.ts";

// The Imp kinds' descriptors are src/api's (one definition per kind); re-exported for the operator's parts.
export { IMP_VMS, IMP_VM_RUNNER_POOLS, IMP_NODES } from "../api/index.ts";
export const SECRETS = { group: "", version: "v1", plural: "secrets", kind: "Secret", namespaced: true } as const;

export interface SecretObject extends KubeObject {
  type?: string;
  data?: Record<string, string>;
  immutable?: boolean;
}
