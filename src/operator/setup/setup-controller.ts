/**
 * Runner setup and registration removal for the ImpVMs of pools (one key per VM):
 *
 *  - a VM bound to a node (status.nodeName, phase Scheduled/Preparing/Booting) without a setup gets
 *    one: register the runner on its pool's forge (name = VM name), seal the one-time setup to the
 *    bound node's published key with the VM uid as associated data, and record the envelope with
 *    status.runner and status.setup (Minted) in one status write — no Secret, so node agents need no
 *    access to Secrets at all (docs/install.md, "A compromised node");
 *  - a VM that is terminal or being deleted has its registration removed (gone counts as done,
 *    busy means wait) before the registration finalizer comes off.
 *
 * Idempotency: status.setup is the record that a VM is registered; it is written right after the
 * mint, and a reconcile that finds it (read from the API, not the cache) never mints again. If the
 * operator dies between mint and record, the next reconcile finds none, the forge refuses the name,
 * the stale runner of that name is removed and the mint repeated once (`PoolForge.mint`): one
 * registered runner per VM name, always. The plaintext exists only in memory between the forge's
 * response and the seal.
 */
import type { Registry } from "prom-client";
import {
  CONDITION_TYPES,
  FINALIZERS,
  LABELS,
  sealSetup,
  type ImpNode,
  type ImpVM,
  type ImpVMRunnerPool,
} from "../../api/index.ts";
import {
  Controller,
  done,
  isNotFound,
  keyOf,
  mutateWithRetry,
  requeueAfter,
  type EventRecorder,
  type Informer,
  type ReconcileContext,
  type ReconcileResult,
  type ResourceClient,
  hasFinalizer,
  addFinalizer,
  removeFinalizer,
  type Stored,
} from "../../kube/index.ts";
import { describeError, NO_FAULTS, systemClock, terminalError, type Clock, type FaultPoints, type Logger } from "../../shared/index.ts";
import { setCondition } from "../pools/conditions.ts";
import { pacedCredentialOf, type PoolForges } from "../forges/index.ts";
import { ForgeSlots } from "./forge-slots.ts";

/** Index of the VM cache by status.nodeName, so a node publishing its key wakes its waiting VMs. */
export const VM_NODE_INDEX = "imp-operator/setup-vm-by-node";
/** Index of the VM cache by the imp.dev/pool label. */
export const VM_POOL_INDEX = "imp-operator/vm-by-pool";

const SETUP_PHASES = new Set(["Scheduled", "Preparing", "Booting"]);
const NODE_KEY_WAIT_MS = 2_000;
/** Forge writes (mints, removals) at once per paced credential (ForgeSlots); two keep its pacing busy without taking every worker. */
const FORGE_WRITES_PER_CREDENTIAL = 2;
/** A VM turned away by ForgeSlots looks again after this even if no wake reaches it. */
const FORGE_SLOT_RECHECK_MS = 5_000;
const BUSY_RECHECK_MS = 10_000;

export interface SetupControllerOptions {
  readonly vms: ResourceClient<ImpVM>;
  readonly vmCache: Informer<ImpVM>;
  readonly poolCache: Informer<ImpVMRunnerPool>;
  readonly nodeCache: Informer<ImpNode>;
  readonly forges: PoolForges;
  readonly recorder: EventRecorder;
  readonly registry: Registry;
  readonly logger: Logger;
  readonly clock?: Clock;
  readonly workers?: number | undefined;
  /** Test fault points setup.after-mint, setup.after-record, teardown.before-deregister (docs/failure-proof-points.md); default none. */
  readonly faults?: FaultPoints;
}

const isTerminal = (vm: Readonly<Stored<ImpVM>>): boolean => vm.status?.phase === "Succeeded" || vm.status?.phase === "Failed";

export class SetupController {
  readonly controller: Controller;
  readonly #o: SetupControllerOptions;
  readonly #clock: Clock;
  readonly #faults: FaultPoints;
  /** Pools seen deleted, so VMs that outlive their pool can still be deregistered. */
  readonly #gonePools = new Map<string, Readonly<Stored<ImpVMRunnerPool>>>();
  readonly #forgeSlots: ForgeSlots;

  constructor(options: SetupControllerOptions) {
    this.#o = options;
    this.#clock = options.clock ?? systemClock;
    this.#faults = options.faults ?? NO_FAULTS;
    this.controller = new Controller({
      name: "imp-runner-setup",
      registry: options.registry,
      // Each reconcile may wait up to a second in its installation's GitHub write pacing (see
      // docs/github.md); with 4 workers a few pools' queues blocked all the others
      // (bench:operator: 16 workers churned 1,000 VMs in 596 s, 4 did not finish in 600 s).
      workers: options.workers ?? 16,
      logger: options.logger,
      clock: this.#clock,
      reconcile: (ctx) => this.#reconcile(ctx),
    });
    this.#forgeSlots = new ForgeSlots({ perKey: FORGE_WRITES_PER_CREDENTIAL, wake: (key) => this.controller.enqueue(key), now: () => this.#clock.now() });
    this.controller.watch(options.vmCache);
    this.controller.watch(options.nodeCache, {
      toKeys: (node) => options.vmCache.byIndex(VM_NODE_INDEX, node.metadata.name).filter((vm) => vm.status?.setup === undefined).map((vm) => keyOf(vm)),
      updateMatters: (old, obj) => old.status?.setupKey?.keyId !== obj.status?.setupKey?.keyId,
    });
    options.poolCache.addEventHandler({
      onAdd: (pool) => this.#gonePools.delete(keyOf(pool)),
      onDelete: (pool) => {
        this.#gonePools.set(keyOf(pool), pool as Readonly<Stored<ImpVMRunnerPool>>);
        if (this.#gonePools.size > 1000) this.#gonePools.delete(this.#gonePools.keys().next().value ?? "");
      },
    });
  }

  async #reconcile(ctx: ReconcileContext): Promise<ReconcileResult> {
    const vm = this.#o.vmCache.get(ctx.key) as Readonly<Stored<ImpVM>> | undefined;
    if (vm === undefined) return done;
    const poolName = vm.metadata.labels?.[LABELS.pool];
    if (poolName === undefined) return done;
    const poolKey = `${vm.metadata.namespace ?? ""}/${poolName}`;
    const pool = (this.#o.poolCache.get(poolKey) as Readonly<Stored<ImpVMRunnerPool>> | undefined) ?? this.#gonePools.get(poolKey);
    const finalized = hasFinalizer(vm, FINALIZERS.runnerRegistration);

    if (vm.metadata.deletionTimestamp !== undefined || isTerminal(vm)) {
      return finalized ? this.#deregister(ctx, vm, pool) : done;
    }
    if (!finalized) {
      await this.#finalizer(ctx, vm, "add");
      return done; // the update event brings the VM back with the finalizer
    }
    if (vm.status?.setup !== undefined) return done;
    if (vm.status?.nodeName === undefined || !SETUP_PHASES.has(vm.status.phase ?? "")) return done;
    if (pool === undefined) return requeueAfter(5_000);
    return this.#setUp(ctx, vm, pool);
  }

  async #setUp(ctx: ReconcileContext, vm: Readonly<Stored<ImpVM>>, pool: Readonly<Stored<ImpVMRunnerPool>>): Promise<ReconcileResult> {
    const minted = await this.#inForgeSlot(ctx, pool, () => this.#mintAndRecord(ctx, vm, pool));
    return minted === "turnedAway" ? requeueAfter(FORGE_SLOT_RECHECK_MS) : minted;
  }

  /** Runs a forge write in a slot of the pool's paced credential (ForgeSlots), or says the VM must wait its turn; unpaced forges need none. */
  async #inForgeSlot<T>(ctx: ReconcileContext, pool: Readonly<Stored<ImpVMRunnerPool>>, write: () => Promise<T>): Promise<T | "turnedAway"> {
    const paced = pacedCredentialOf(pool);
    if (paced === undefined) return write();
    if (!this.#forgeSlots.take(paced, ctx.key)) return "turnedAway";
    try {
      return await write();
    } finally {
      this.#forgeSlots.release(paced);
    }
  }

  async #mintAndRecord(ctx: ReconcileContext, vm: Readonly<Stored<ImpVM>>, pool: Readonly<Stored<ImpVMRunnerPool>>): Promise<ReconcileResult> {
    const name = vm.metadata.name;
    const uid = vm.metadata.uid;
    // The status is the record of a registration, and the cache may not show our own last write
    // yet: read the VM itself before minting, so a setup is never minted twice.
    const live = await this.#o.vms.get({ namespace: vm.metadata.namespace, name }, ctx.signal).catch((err: unknown) => (isNotFound(err) ? undefined : Promise.reject(err)));
    if (live === undefined || live.metadata.uid !== uid || live.status?.setup !== undefined) return done;
    const nodeName = vm.status?.nodeName ?? "";
    const key = (this.#o.nodeCache.get(nodeName) as Readonly<Stored<ImpNode>> | undefined)?.status?.setupKey;
    if (key === undefined) {
      ctx.logger.debug({ node: nodeName }, "waiting for the node to publish its setup key");
      return requeueAfter(NODE_KEY_WAIT_MS);
    }
    const forge = await this.#o.forges.forPool(pool, ctx.signal);
    const runner = await forge.mint(name, ctx.signal);
    const mintedAt = this.#clock.now();
    // Outside the try below: a fault here stands in for a crash right after the mint, and nothing cleans up after it.
    await this.#faults.hit("setup.after-mint", ctx.signal);
    try {
      const sealed = await sealSetup(new TextEncoder().encode(runner.setup.reveal()), { publicKey: key.publicKey, keyId: key.keyId }, uid);
      await this.#recordMinted(ctx, live, JSON.stringify(sealed), runner.runnerId, mintedAt);
    } catch (err) {
      // The runner is registered but nothing records it: take it back now if we can. If this fails
      // too, the next attempt finds the name taken and removes it then.
      await forge.removeRunner(name, runner.runnerId).catch((undo: unknown) => ctx.logger.warn({ runner: name, err: describeError(undo) }, "cannot take back the registration of a setup that was not recorded; the next mint removes it"));
      throw err;
    }
    // Recorded, but this reconcile has not ended: a retry must find the setup in the status and never mint again.
    await this.#faults.hit("setup.after-record", ctx.signal);
    await this.#o.recorder.record(vm, { type: "Normal", reason: "RunnerRegistered", message: `Registered ${forge.kind === "gitea" ? "Gitea" : "GitHub"} runner ${name} (id ${runner.runnerId}); setup sealed to node ${nodeName} key ${key.keyId}`, signal: ctx.signal });
    return done;
  }

  /** Writes the sealed setup and the runner into the status in one write: the record that the VM is registered. */
  async #recordMinted(ctx: ReconcileContext, vm: Readonly<Stored<ImpVM>>, sealed: string, runnerId: number, mintedAt: number): Promise<void> {
    const now = this.#clock.now();
    await mutateWithRetry(this.#o.vms, {
      ref: { namespace: vm.metadata.namespace, name: vm.metadata.name },
      subresource: "status",
      // The VM as read just before the mint: current unless something wrote it meanwhile (then a 409 and a fresh read).
      from: vm as Stored<ImpVM>,
      signal: ctx.signal,
      mutate: (draft) => {
        const status = draft.status ?? {};
        if (draft.metadata.uid !== vm.metadata.uid) throw terminalError("SetupVmReplaced", `Cannot record the setup of ${vm.metadata.name}: the VM was deleted and re-created`);
        if (status.setup !== undefined) throw terminalError("SetupAlreadyRecorded", `Cannot record the setup of ${vm.metadata.name}: its status already holds one (state ${status.setup.state})`);
        if (status.phase === "Succeeded" || status.phase === "Failed") throw terminalError("SetupVmEnded", `Cannot record the setup of ${vm.metadata.name}: the VM already ended (${status.phase})`);
        draft.status = {
          ...status,
          runner: { id: runnerId, name: draft.metadata.name },
          setup: { state: "Minted", sealed, ...(Number.isFinite(mintedAt) ? { mintedAt: new Date(mintedAt).toISOString() } : {}) },
          conditions: setCondition(status.conditions, { type: CONDITION_TYPES.vm.SetupReady, status: "True", reason: "Minted", message: "The VM's status holds the one-time runner setup, sealed to its node" }, now),
        };
      },
    });
  }

  async #deregister(ctx: ReconcileContext, vm: Readonly<Stored<ImpVM>>, pool: Readonly<Stored<ImpVMRunnerPool>> | undefined): Promise<ReconcileResult> {
    const name = vm.metadata.name;
    await this.#faults.hit("teardown.before-deregister", ctx.signal);
    if (pool === undefined) {
      await this.#o.recorder.record(vm, { type: "Warning", reason: "RegistrationUnknown", message: `The pool of ${name} is gone; its registration on the forge (if any) cannot be looked up and is left to the forge's cleanup of offline runners`, signal: ctx.signal });
    } else {
      const result = await this.#inForgeSlot(ctx, pool, async () => (await this.#o.forges.forPool(pool, ctx.signal)).removeRunner(name, vm.status?.runner?.id, ctx.signal));
      if (result === "turnedAway") return requeueAfter(FORGE_SLOT_RECHECK_MS);
      if (result === "busy") {
        ctx.logger.info({ runner: name }, "runner still busy on its forge; waiting before removing its registration");
        return requeueAfter(BUSY_RECHECK_MS);
      }
    }
    await this.#finalizer(ctx, vm, "remove");
    ctx.logger.info({ runner: name }, "runner registration removed");
    return done;
  }

  async #finalizer(ctx: ReconcileContext, vm: Readonly<Stored<ImpVM>>, change: "add" | "remove"): Promise<void> {
    const ref = { namespace: vm.metadata.namespace, name: vm.metadata.name };
    try {
      if (change === "add") await addFinalizer(this.#o.vms, ref, FINALIZERS.runnerRegistration, ctx.signal);
      else await removeFinalizer(this.#o.vms, ref, FINALIZERS.runnerRegistration, ctx.signal);
    } catch (err) {
      if (isNotFound(err)) return;
      ctx.logger.warn({ err: describeError(err) }, "finalizer update failed");
      throw err;
    }
  }
}
