/**
 * Seals a VM's Secret inputs to its node (one key per VM). Node agents cannot read Secrets — a node
 * a job escaped to must not reach the forge credentials or any tenant's Secrets (docs/install.md,
 * "A compromised node") — so for a VM bound to a node whose environment or image pull reads
 * Secrets, the operator reads exactly the keys it uses (`secretKeysNeeded`), seals them to the
 * node's published key with the VM uid as associated data (purpose `inputs`), and writes the
 * envelope to `status.inputs` once. A missing Secret is left out: the agent's plan names it when it
 * fails the VM. The agent removes the envelope when the VM ends; the node-loss controller does for a
 * lost node.
 */
import type { Registry } from "prom-client";
import { sealSetup, secretKeysNeeded, templateOf, vmInputsFrom, type ImpNode, type ImpVM, type ImpVMTemplate } from "../../api/index.ts";
import { Controller, done, isNotFound, keyOf, mutateWithRetry, requeueAfter, type EventRecorder, type Informer, type ReconcileContext, type ReconcileResult, type ResourceClient, type Stored } from "../../kube/index.ts";
import { describeError, ImpError, systemClock, type Clock, type Logger } from "../../shared/index.ts";
import type { SecretObject } from "../resources.ts";
import { VM_NODE_INDEX } from "./setup-controller.ts";

const NODE_KEY_WAIT_MS = 2_000;
const ACTIVE_PHASES = new Set(["Scheduled", "Preparing", "Booting", "Running"]);

export interface InputsControllerOptions {
  readonly vms: ResourceClient<ImpVM>;
  readonly secrets: Pick<ResourceClient<SecretObject>, "get">;
  readonly vmCache: Informer<ImpVM>;
  readonly nodeCache: Informer<ImpNode>;
  readonly templateCache: Informer<ImpVMTemplate>;
  readonly recorder: EventRecorder;
  readonly registry: Registry;
  readonly logger: Logger;
  readonly clock?: Clock;
}

export class InputsController {
  readonly controller: Controller;
  readonly #o: InputsControllerOptions;

  constructor(options: InputsControllerOptions) {
    this.#o = options;
    this.controller = new Controller({ name: "imp-vm-inputs", registry: options.registry, workers: 4, logger: options.logger, clock: options.clock ?? systemClock, reconcile: (ctx) => this.#reconcile(ctx) });
    this.controller.watch(options.vmCache, { updateMatters: (old, vm) => old.status?.nodeName !== vm.status?.nodeName || old.status?.phase !== vm.status?.phase });
    this.controller.watch(options.nodeCache, {
      toKeys: (node) => options.vmCache.byIndex(VM_NODE_INDEX, node.metadata.name).filter((vm) => vm.status?.inputs === undefined).map((vm) => keyOf(vm)),
      updateMatters: (old, obj) => old.status?.setupKey?.keyId !== obj.status?.setupKey?.keyId,
    });
  }

  async #reconcile(ctx: ReconcileContext): Promise<ReconcileResult> {
    const vm = this.#o.vmCache.get(ctx.key) as Readonly<Stored<ImpVM>> | undefined;
    if (vm === undefined || vm.metadata.deletionTimestamp !== undefined || vm.status?.inputs !== undefined) return done;
    const nodeName = vm.status?.nodeName;
    if (nodeName === undefined || !ACTIVE_PHASES.has(vm.status?.phase ?? "")) return done;
    const namespace = vm.metadata.namespace ?? "";
    const referenced = vm.spec.templateRef === undefined ? undefined : (this.#o.templateCache.get(`${namespace}/${vm.spec.templateRef.name}`) as Readonly<Stored<ImpVMTemplate>> | undefined)?.spec;
    // Not in the cache yet, or missing (then the agent fails the VM: TemplateNotFound, and this stops).
    if (vm.spec.template === undefined && referenced === undefined) return requeueAfter(NODE_KEY_WAIT_MS);
    const needed = secretKeysNeeded(vm, templateOf(vm, referenced));
    if (needed.size === 0) return done;
    const key = (this.#o.nodeCache.get(nodeName) as Readonly<Stored<ImpNode>> | undefined)?.status?.setupKey;
    if (key === undefined) return requeueAfter(NODE_KEY_WAIT_MS);
    const found = new Map<string, Record<string, string>>();
    for (const name of needed.keys()) {
      const secret = await this.#o.secrets.get({ namespace, name }, ctx.signal).catch((err: unknown) => (isNotFound(err) ? undefined : Promise.reject(err)));
      if (secret !== undefined) found.set(name, decodeData(secret.data));
    }
    let sealed: string;
    try {
      sealed = JSON.stringify(await sealSetup(new TextEncoder().encode(JSON.stringify(vmInputsFrom(needed, found))), key, vm.metadata.uid, "inputs"));
    } catch (err) {
      if (!(err instanceof ImpError) || err.errorClass !== "terminal") throw err;
      // Too large or a bad node key: nothing is sealed, the agent's bounded wait fails the VM; say why here.
      await this.#o.recorder.record(vm, { type: "Warning", reason: "InputsNotSealed", message: describeError(err), signal: ctx.signal });
      return done;
    }
    await mutateWithRetry(this.#o.vms, {
      ref: { namespace, name: vm.metadata.name },
      subresource: "status",
      signal: ctx.signal,
      mutate: (d) => {
        const st = d.status;
        if (d.metadata.uid !== vm.metadata.uid || st?.inputs !== undefined || st?.nodeName !== nodeName || !ACTIVE_PHASES.has(st.phase ?? "")) return false;
        d.status = { ...st, inputs: { sealed } };
      },
    }).catch((err: unknown) => {
      if (!isNotFound(err)) throw err;
    });
    ctx.logger.debug({ vm: ctx.key, node: nodeName, secrets: [...found.keys()] }, "sealed the VM's Secret inputs to its node");
    return done;
  }
}

function decodeData(data: Readonly<Record<string, string>> | undefined): Record<string, string> {
  return Object.fromEntries(Object.entries(data ?? {}).map(([k, v]) => [k, Buffer.from(v, "base64").toString("utf8")]));
}
