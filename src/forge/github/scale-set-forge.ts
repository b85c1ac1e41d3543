/**
 * GitHub's runner scale sets behind the forge interface: a runner is minted with the scale set's
 * own `generatejitconfig`, so it takes only jobs the scale set acquired; it is removed through the
 * Actions service (by name, then id, as actions-runner-controller does) and listed with the REST
 * runner list, where scale-set runners appear beside the others. Queued jobs are not listed: in
 * this mode the scale set's statistics are the demand (src/operator/scale-sets).
 */
import { ScaleSetErrorCode, type GitHubClient, type GitHubScope, type ScaleSetClient, type ScaleSetJitConfig } from "./index.ts";
import { conflictError, ImpError, retryableError } from "../../shared/index.ts";
import { SetupText, type ForgeRunner, type MintedRunner, type PoolForge, type RemoveResult } from "../types.ts";

export interface GitHubScaleSetForgeOptions {
  readonly client: Pick<ScaleSetClient, "runnerGroupId" | "findScaleSet" | "generateJitConfig" | "findRunner" | "removeRunner" | "deleteScaleSet">;
  /** For the runner list (REST). */
  readonly rest: Pick<GitHubClient, "listRunners">;
  readonly scope: GitHubScope;
  readonly scaleSetName: string;
  readonly runnerGroup: string;
}

const isRunnerExists = (err: unknown): boolean => err instanceof ImpError && err.code === ScaleSetErrorCode.RunnerExists;

export class GitHubScaleSetForge implements PoolForge {
  readonly kind = "github-scale-set" as const;
  readonly #o: GitHubScaleSetForgeOptions;
  #scaleSetId: number | undefined;

  constructor(options: GitHubScaleSetForgeOptions) {
    this.#o = options;
  }

  /** Registers runner `name` in the scale set; a stale registration of the same name (a crash after minting) is removed and the mint repeated once. */
  async mint(name: string, signal?: AbortSignal): Promise<MintedRunner> {
    const id = await this.#id(signal);
    try {
      return toMinted(await this.#o.client.generateJitConfig(id, name, signal));
    } catch (err) {
      if (err instanceof ImpError && err.code === ScaleSetErrorCode.ScaleSetNotFound) this.#scaleSetId = undefined;
      if (!isRunnerExists(err)) throw err;
    }
    if ((await this.removeRunner(name, undefined, signal)) === "busy") throw retryableError("RunnerNameBusy", `Cannot register runner ${name}: a runner of that name is running a job`);
    try {
      return toMinted(await this.#o.client.generateJitConfig(id, name, signal));
    } catch (err) {
      if (isRunnerExists(err)) throw conflictError("RunnerNameTaken", `Cannot register runner ${name}: the name is taken again right after its stale registration was removed`, { cause: err });
      throw err;
    }
  }

  async removeRunner(name: string, knownId: number | undefined, signal?: AbortSignal): Promise<RemoveResult> {
    const ids = new Set(knownId === undefined ? [] : [knownId]);
    const found = await this.#o.client.findRunner(name, signal);
    if (found !== undefined) ids.add(found.id);
    let busy = false;
    for (const id of ids) if ((await this.#o.client.removeRunner(id, signal)) === "busy") busy = true;
    return busy ? "busy" : "done";
  }

  async listRunners(prefix: string): Promise<readonly ForgeRunner[]> {
    const runners = await this.#o.rest.listRunners(this.#o.scope);
    return runners.filter((r) => r.name.startsWith(prefix)).map((r) => ({ id: r.id, name: r.name, busy: r.busy, online: r.status === "online" }));
  }

  /** Deletes the pool's scale set on GitHub (the pool is gone); one already gone counts as done. */
  async retire(signal?: AbortSignal): Promise<void> {
    const groupId = await this.#o.client.runnerGroupId(this.#o.runnerGroup, signal);
    const set = await this.#o.client.findScaleSet(this.#o.scaleSetName, groupId, signal);
    if (set !== undefined) await this.#o.client.deleteScaleSet(set.id, signal);
  }

  async #id(signal?: AbortSignal): Promise<number> {
    if (this.#scaleSetId !== undefined) return this.#scaleSetId;
    const groupId = await this.#o.client.runnerGroupId(this.#o.runnerGroup, signal);
    const set = await this.#o.client.findScaleSet(this.#o.scaleSetName, groupId, signal);
    // The pool's listener creates the scale set; until it has, there is nothing to register in.
    if (set === undefined) throw retryableError("ScaleSetNotReady", `Cannot register a runner in scale set ${this.#o.scaleSetName}: it does not exist on GitHub yet (the pool's listener creates it)`);
    this.#scaleSetId = set.id;
    return set.id;
  }
}

function toMinted(jit: ScaleSetJitConfig): MintedRunner {
  return { runnerId: jit.runnerId, runnerName: jit.runnerName, setup: new SetupText(jit.encodedJitConfig.reveal()) };
}
