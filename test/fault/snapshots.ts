/**
 * What the fault cases of memory-snapshot pools share: each node's published snapshots, clearing them
 * between cases (the cases share the world's class and image), serving jobs until one ran in a
 * restored VM, and what template builds left behind.
 */
import assert from "node:assert/strict";
import { readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { waitFor } from "../../src/shared/index.ts";
import { processesMentioning } from "../harness/node-agent.ts";
import type { CaseContext } from "./fault-case.ts";

/** Snapshot keys published on `node` (its memory snapshots directory). */
export async function snapshotsOn(node: { stateDir: string }): Promise<string[]> {
  return (await readdir(join(node.stateDir, "snapshots")).catch(() => [] as string[])).filter((n) => /^[0-9a-f]{64}$/.test(n));
}

/** Waits until some node has published a memory snapshot; returns that node's state directory and key. */
export async function aSnapshot(ctx: CaseContext): Promise<{ stateDir: string; key: string }> {
  return waitFor("a node's memory snapshot of the pool's template", async () => {
    for (const node of ctx.world.nodes) {
      const [key] = await snapshotsOn(node);
      if (key !== undefined) return { stateDir: node.stateDir, key };
    }
    return undefined;
  }, { timeoutMs: 300_000, intervalMs: 250 });
}

/**
 * Removes every node's memory snapshots: the snapshot cases share the world's class and image, so
 * one case's templates would otherwise serve the next (the agents look them up anew each time).
 */
export async function clearSnapshots(ctx: CaseContext): Promise<void> {
  for (const node of ctx.world.nodes) {
    for (const key of await snapshotsOn(node)) await rm(join(node.stateDir, "snapshots", key), { recursive: true, force: true });
  }
}

/** One job of the case's pool, served successfully; the runner it ran on and how that VM started. */
export async function serveJob(ctx: CaseContext, name: string): Promise<{ job: string; runner: string; startedFrom?: "Boot" | "Snapshot" }> {
  const job = ctx.world.queueJob(`${ctx.pool}-${name}`, [{ name: "step", run: "echo hi" }], ctx.labels);
  await ctx.world.waitForJob(job, "completed", 300_000);
  assert.equal(job.conclusion, "success", `${job.name}: ${job.result?.log ?? ""}`);
  const startedFrom = ctx.world.history(job.runnerName ?? "")?.last.status?.startedFrom;
  return { job: job.name, runner: job.runnerName ?? "?", ...(startedFrom === undefined ? {} : { startedFrom }) };
}

/**
 * Jobs one after another until one ran in a restored VM (each node boots once and builds its
 * template; a failed build waits 30 s before it is tried again), for at most `maxMs`; what each ran on.
 */
export async function untilRestored(ctx: CaseContext, name: string, maxMs = 240_000): Promise<string> {
  const seen: string[] = [];
  const until = Date.now() + maxMs;
  for (let i = 1; Date.now() < until; i++) {
    const served = await serveJob(ctx, `${name}-${i}`);
    seen.push(`${served.job} on ${served.runner} (${served.startedFrom ?? "?"})`);
    if (served.startedFrom === "Snapshot") return `${seen.length} job(s): ${seen.join(", ")}`;
  }
  throw new Error(`no job in ${maxMs / 1000} s ran in a restored VM: ${seen.join(", ")}`);
}

/** Template builds' leftovers on every node: half-built snapshots and template VMs' directories and processes. */
export async function templateLeftovers(ctx: CaseContext): Promise<string[]> {
  const found: string[] = [];
  for (const node of ctx.world.nodes) {
    for (const e of await readdir(join(node.stateDir, "snapshots")).catch(() => [] as string[])) if (e.startsWith(".building-")) found.push(`${node.name}: snapshots/${e}`);
    for (const e of await readdir(join(node.stateDir, "vms")).catch(() => [] as string[])) if (e.startsWith("tpl-")) found.push(`${node.name}: vms/${e}`);
  }
  for (const pid of await processesMentioning("/vms/tpl-")) found.push(`process ${pid}`);
  return found;
}
