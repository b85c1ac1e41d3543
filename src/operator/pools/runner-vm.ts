import { API_VERSION, CONDITION_TYPES, FINALIZERS, IMP_VM_RUNNER_POOL, LABELS, type ImpVM, type ImpVMRunnerPool } from "../../api/index.ts";
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
      // The pool's UID names the volume: a pool deleted and made again under its name starts cold,
      // and no other pool's VM can name it (only this pool writes its VMs' specs).
      ...(pool.spec.cache === undefined ? {} : { cache: { volume: pool.metadata.uid, size: pool.spec.cache.size, paths: [...pool.spec.cache.paths] } }),
    },
  } as ImpVM;
}

/**
 * Whether the VM waits to be placed and the scheduler found no node with room for it: Pending,
 * unbound, not being deleted, its Scheduled condition False with reason Unschedulable. The
 * scheduler's own verdict, so the pools do no capacity arithmetic of their own.
 */
export function waitsForCapacity(vm: { readonly metadata: { readonly deletionTimestamp?: string | undefined }; readonly status?: { readonly phase?: string | undefined; readonly nodeName?: string | undefined; readonly conditions?: ReadonlyArray<{ readonly type: string; readonly status: string; readonly reason?: string | undefined }> | undefined } | undefined }): boolean {
  if (vm.metadata.deletionTimestamp !== undefined || vm.status?.nodeName !== undefined) return false;
  if (vm.status?.phase !== undefined && vm.status.phase !== "Pending") return false;
  const scheduled = vm.status?.conditions?.find((c) => c.type === CONDITION_TYPES.vm.Scheduled);
  return scheduled?.status === "False" && scheduled.reason === "Unschedulable";
}
