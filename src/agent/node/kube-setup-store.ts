/**
 * The node agent's {@link SetupStore} on the Kubernetes API: the sealed setup is the data of a
 * Secret owned by its ImpVM; the handoff is recorded in the VM's status (`execId`, and the setup's
 * state Minted → Sent → … → Deleted) with resourceVersion preconditions, so a record never rewinds.
 */
import { IMP_VM, SETUP_SECRET, setupSecretName, type ImpVM } from "../../api/index.ts";
import { isNotFound, mutateWithRetry, type ResourceClient, type Stored } from "../../kube/index.ts";
import { terminalError } from "../../shared/index.ts";
import type { SetupStore, VmRef } from "../vm/index.ts";
import type { SecretObject } from "./node-agent.ts";

export interface KubeSetupStoreOptions {
  readonly vms: ResourceClient<ImpVM>;
  readonly secrets: ResourceClient<SecretObject>;
  /** The VM as last seen (its status names the Secret), also after it vanished from the cache. */
  readonly lastSeen: (vm: VmRef) => Readonly<Stored<ImpVM>> | undefined;
}

export class KubeSetupStore implements SetupStore {
  readonly #o: KubeSetupStoreOptions;

  constructor(options: KubeSetupStoreOptions) {
    this.#o = options;
  }

  #secretName(vm: VmRef): string {
    return this.#o.lastSeen(vm)?.status?.setup?.secretName ?? setupSecretName(vm.name);
  }

  async readSealed(vm: VmRef, signal?: AbortSignal): Promise<string | undefined> {
    const name = this.#secretName(vm);
    let secret: SecretObject;
    try {
      secret = await this.#o.secrets.get({ namespace: vm.namespace, name }, signal);
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
    // Only a setup Secret owned by this very VM is read; the seal's associated data checks the same again.
    const owned = (secret.metadata?.ownerReferences ?? []).some((o) => o.uid === vm.uid && o.kind === IMP_VM.kind);
    if (secret.type !== SETUP_SECRET.type || !owned) {
      throw terminalError("SetupSecretNotOwned", `Cannot use Secret ${vm.namespace}/${name} as the setup of ${vm.name}: it is not an ${SETUP_SECRET.type} Secret owned by that ImpVM`);
    }
    const raw = secret.data?.[SETUP_SECRET.sealedKey];
    return raw === undefined ? undefined : Buffer.from(raw, "base64").toString("utf8");
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

  async delete(vm: VmRef): Promise<void> {
    const seen = this.#o.lastSeen(vm);
    await this.#o.secrets.delete({ namespace: vm.namespace, name: this.#secretName(vm) }).catch((err: unknown) => {
      if (!isNotFound(err)) throw err;
    });
    if (seen !== undefined && seen.status?.setup === undefined) return;
    await mutateWithRetry(this.#o.vms, {
      ref: { namespace: vm.namespace, name: vm.name },
      subresource: "status",
      mutate: (d) => {
        if (d.status?.setup === undefined || d.status.setup.state === "Deleted") return false;
        d.status = { ...d.status, setup: { ...d.status.setup, state: "Deleted" } };
      },
    }).catch((err: unknown) => {
      if (!isNotFound(err)) throw err;
    });
  }
}
