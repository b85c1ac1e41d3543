/**
 * What the operator's inputs controller does, for tests that run an agent without an operator:
 * seal a VM's Secret values to its node's published key (purpose `inputs`), as `status.inputs`.
 */
import type { KubeConfig } from "@kubernetes/client-node";
import { IMP_NODES, sealSetup, type ImpNode } from "../../src/api/index.ts";
import { createResourceClient } from "../../src/kube/index.ts";
import { waitFor } from "../../src/shared/index.ts";

/** `status.inputs` for VM `vmUid` on `nodeName`, holding `secrets` (decoded data by Secret name); waits for the node's key. */
export async function sealedInputsStatus(kubeConfig: KubeConfig, nodeName: string, vmUid: string, secrets: Record<string, Record<string, string>>): Promise<{ inputs: { sealed: string } }> {
  const nodes = createResourceClient<ImpNode>(kubeConfig, IMP_NODES);
  const key = await waitFor(`ImpNode ${nodeName} publishing its setup key`, () => nodes.get({ name: nodeName }).then((n) => n.status?.setupKey, () => undefined), { timeoutMs: 60_000 });
  const sealed = await sealSetup(new TextEncoder().encode(JSON.stringify({ v: 1, secrets })), key, vmUid, "inputs");
  return { inputs: { sealed: JSON.stringify(sealed) } };
}
