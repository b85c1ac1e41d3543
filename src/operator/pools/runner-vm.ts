import { API_VERSION, FINALIZERS, IMP_VM_RUNNER_POOL, LABELS, type ImpVM, type ImpVMRunnerPool } from "../../api/index.ts";
import type { Stored } from "../../kube/index.ts";

/** A new runner VM of the pool: named `<pool>-xxxxx` by the API server, owned by the pool, ephemeral, its setup required. */
export function newRunnerVm(pool: Readonly<Stored<ImpVMRunnerPool>>): ImpVM {
  const name = pool.metadata.name;
  return {
    apiVersion: API_VERSION,
    kind: "ImpVM",
    metadata: {
      generateName: `${name}-`,
      namespace: pool.metadata.namespace ?? "",
      labels: { [LABELS.pool]: name, [LABELS.managedBy]: "imp-operator" },
      ownerReferences: [{ apiVersion: API_VERSION, kind: IMP_VM_RUNNER_POOL.kind, name, uid: pool.metadata.uid, controller: true, blockOwnerDeletion: true }],
      // Set at creation, so no registration can ever exist for a VM without it.
      finalizers: [FINALIZERS.runnerRegistration],
    },
    spec: {
      templateRef: { name: pool.spec.templateName },
      workload: { command: [...pool.spec.runnerCommand], ...(pool.spec.runnerEnv === undefined ? {} : { env: pool.spec.runnerEnv.map((e) => ({ ...e })) }) },
      lifecycle: "ephemeral",
      runnerSetup: "Required",
      ...(pool.spec.runnerSetupDelivery === undefined ? {} : { runnerSetupDelivery: pool.spec.runnerSetupDelivery }),
    },
  } as ImpVM;
}
