/**
 * The two GitHub-side steps of a runner VM's life: register it (generate-jitconfig) exactly once,
 * and remove the registration when the VM ends. Both are idempotent by the runner name, which is
 * the ImpVM name: GitHub refuses a second runner of the same name, so whatever a crash left behind
 * under that name is the one stale registration of this VM and may be removed.
 */
import { GitHubErrorCode, type JitRunner } from "../../github/index.ts";
import { conflictError, ImpError, retryableError } from "../../shared/index.ts";
import type { PoolGitHub } from "./github-clients.ts";

/** A 409, or a 422 whose message says the name is taken (GitHub has answered both over time). */
export function isNameTaken(err: unknown): boolean {
  if (!(err instanceof ImpError)) return false;
  if (err.code === GitHubErrorCode.Conflict) return true;
  return err.code === GitHubErrorCode.Invalid && /already exists/i.test(err.message);
}

/** Ids of the runners registered under exactly `name` (the list filter is a prefix match on some GitHub versions). */
export async function runnerIdsNamed(gh: PoolGitHub, name: string): Promise<number[]> {
  const runners = await gh.client.listRunners(gh.scope, { name });
  return runners.filter((r) => r.name === name).map((r) => r.id);
}

/**
 * Removes every registration of `name` (and `knownId`). `busy` if GitHub refuses because one is
 * running a job (422): not an error, the caller waits for the job to end.
 */
export async function removeRegistrations(gh: PoolGitHub, name: string, knownId: number | undefined): Promise<"done" | "busy"> {
  const ids = new Set(knownId === undefined ? [] : [knownId]);
  // A crash between minting and recording leaves a runner nobody knows the id of: look it up by name.
  for (const id of await runnerIdsNamed(gh, name)) ids.add(id);
  let busy = false;
  for (const id of ids) if ((await gh.client.deleteRunner(gh.scope, id)) === "busy") busy = true;
  return busy ? "busy" : "done";
}

/**
 * Registers runner `name`. If GitHub says the name is taken, the taken one is a stale registration
 * of this same VM (minted, then the operator died before storing it): it is deleted and the mint
 * is repeated once. A second refusal is a conflict for the queue to retry, never a loop here.
 */
export async function mintRunner(gh: PoolGitHub, request: { readonly name: string; readonly labels: readonly string[] }): Promise<JitRunner> {
  const runnerGroupId = await gh.runnerGroupId();
  const attempt = (): Promise<JitRunner> => gh.client.generateJitConfig(gh.scope, { name: request.name, runnerGroupId, labels: request.labels });
  try {
    return await attempt();
  } catch (err) {
    if (!isNameTaken(err)) throw err;
  }
  if ((await removeRegistrations(gh, request.name, undefined)) === "busy") {
    throw retryableError("RunnerNameBusy", `Cannot register runner ${request.name}: a runner of that name is running a job`);
  }
  try {
    return await attempt();
  } catch (err) {
    if (isNameTaken(err)) throw conflictError("RunnerNameTaken", `Cannot register runner ${request.name}: the name is taken again right after its stale registration was removed`, { cause: err });
    throw err;
  }
}
