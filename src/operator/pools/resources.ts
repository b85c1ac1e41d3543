/**
 * The kinds the operator reads and writes, as REST descriptors, and the few core shapes it needs
 * (Secrets). One place, so every controller of the operator addresses the same resources.
 */
import { GROUP, IMP_NODE, IMP_VM, IMP_VM_RUNNER_POOL, VERSION } from "../../api/index.ts";
import { resourceDescriptor, type KubeObject } from "../../kube/index.ts";

export const IMP_VMS = resourceDescriptor({ group: GROUP, version: VERSION, ...IMP_VM });
export const IMP_VM_RUNNER_POOLS = resourceDescriptor({ group: GROUP, version: VERSION, ...IMP_VM_RUNNER_POOL });
export const IMP_NODES = resourceDescriptor({ group: GROUP, version: VERSION, ...IMP_NODE });
export const SECRETS = { group: "", version: "v1", plural: "secrets", kind: "Secret", namespaced: true } as const;

export interface SecretObject extends KubeObject {
  type?: string;
  data?: Record<string, string>;
  immutable?: boolean;
}
