/**
 * The node agent's {@link SetupStore} on the Kubernetes API: the sealed setup is in its ImpVM's
 * status (`status.setup.sealed`, written by the operator; agents cannot read Secrets); the handoff is
 * recorded there too (`execId`, and the setup's state Minted → Sent → … → Deleted) with
 * resourceVersion preconditions, so a record never rewinds.
 */
import { withoutSealed, type ImpVM } from "../../api/index.ts";
import { isNotFound, mutateWithRetry, type ResourceClient, type Stored } from "../../kube/index.ts";
import { terminalError } from "../../shared/index.ts";
import type { SetupStore, VmRef } from "../vm/index.ts";

export interface KubeSetupStoreOptions {
  readonly vms: ResourceClient<ImpVM>;
  /** The VM as last seen, also after it vanished from the cache. */
  readonly lastSeen: (vm: VmRef) => Readonly<Stored<ImpVM>> | undefined;
}

export class KubeSetupStore implements SetupStore {
  readonly #o: KubeSetupStoreOptions;

  constructor(options: KubeSetupStoreOptions) {
    this.#o = options;
  }

  async readSealed(vm: VmRef, signal?: AbortSignal): Promise<string | undefined> {
    const seen = this.#o.lastSeen(vm);
    if (seen?.metadata.uid === vm.uid && seen.status?.setup?.sealed !== undefined) return seen.status.setup.sealed;
    // The cache may not have the operator's write yet: ask the API.
    let live: Stored<ImpVM>;
    try {
      live = await this.#o.vms.get({ namespace: vm.namespace, name: vm.name }, signal);
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
    return live.metadata.uid === vm.uid ? live.status?.setup?.sealed : undefined;
  }
  async recordSent(vm: VmRef, execId: string, signal: AbortSignal): Promise<void> {
    await mutateWithRetry(this.#o.vms, {
      ref: { namespace: vm.namespace, name: vm.name },
      subresource: "status",
      signal,
      mutate: (d) => {
        const status = d.status ?? {};
        if (status.execId !== undefined && status.execId !== execId) throw terminalError("ExecIdMismatch", `Cannot send the workload: the VM's execId is ${status.execId}, not ${execId}`);
        if (status.setup === undefined) {
          if (status.execId === execId) return false;
          d.status = { ...status, execId };
          return;
        }
        if (status.setup.state !== "Minted") throw terminalError("SetupAlreadySent", `Cannot send the setup: its state is ${status.setup.state}; a one-time setup is never sent twice`);
        d.status = { ...status, execId, setup: { ...status.setup, state: "Sent" } };
      },
    });
  }

  /** Removes the sealed setup and the sealed inputs from the status (the setup recorded Deleted). */
  async delete(vm: VmRef): Promise<void> {
    const seen = this.#o.lastSeen(vm);
    if (seen !== undefined && withoutSealed(seen.status) === undefined) return;
    await mutateWithRetry(this.#o.vms, {
      ref: { namespace: vm.namespace, name: vm.name },
      subresource: "status",
      mutate: (d) => {
        const next = d.metadata.uid === vm.uid ? withoutSealed(d.status) : undefined;
        if (next === undefined) return false;
        d.status = next;
      },
    }).catch((err: unknown) => {
      if (!isNotFound(err)) throw err;
    });
  }
}
