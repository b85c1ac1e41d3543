import assert from "node:assert/strict";
import { mkdtemp, rm, statfs } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { Registry } from "prom-client";
import { AgentMetrics } from "./agent-metrics.ts";

describe("agent metrics", () => {
  it("report the size and free space of the state directory's filesystem at each scrape", async (t) => {
    const dir = await mkdtemp(join(tmpdir(), "imp-metrics-"));
    t.after(() => rm(dir, { recursive: true, force: true }));
    const registry = new Registry();
    new AgentMetrics(registry, dir);
    const value = async (name: string): Promise<number | undefined> => (await registry.getSingleMetric(name)?.get())?.values[0]?.value;
    const st = await statfs(dir);
    assert.equal(await value("imp_agent_state_dir_size_bytes"), st.blocks * st.bsize);
    const free = await value("imp_agent_state_dir_free_bytes");
    assert.ok(free !== undefined && Math.abs(free - st.bavail * st.bsize) < 256 * 2 ** 20, `free ${free ?? "none"} ≈ ${st.bavail * st.bsize}`);
    // A state directory that is gone reports nothing rather than a stale or zero value.
    await rm(dir, { recursive: true, force: true });
    const gone = new Registry();
    new AgentMetrics(gone, dir);
    assert.equal((await gone.getSingleMetric("imp_agent_state_dir_free_bytes")?.get())?.values.length, 0);
  });

  it("has every ended-VM reason of a pool at 0 from its first VM on, so the first failure counts in increase()", async () => {
    const registry = new Registry();
    const metrics = new AgentMetrics(registry);
    const ended = async (reason: string, pool: string): Promise<number | undefined> => (await registry.getSingleMetric("imp_agent_vms_ended_total")?.get())?.values.find((v) => v.labels["reason"] === reason && v.labels["pool"] === pool)?.value;
    assert.equal(await ended("BootTimeout", "linux"), undefined, "no series for a pool not seen");
    metrics.onRuntimeEvent({ kind: "prepared", ms: 120 }, "linux");
    assert.equal(await ended("BootTimeout", "linux"), 0);
    assert.equal(await ended("PrepareFailed", "linux"), 0);
    assert.equal(await ended("Completed", "linux"), 0);
    metrics.onRuntimeEvent({ kind: "ended", vm: { namespace: "ci", name: "linux-1", uid: "u1" }, outcome: { succeeded: false, reason: "BootTimeout", message: "no hello" } }, "linux");
    assert.equal(await ended("BootTimeout", "linux"), 1);
    assert.equal(await ended("BootTimeout", "docker"), undefined);
  });

  it("counts cache clones by result, every result at 0 from the start", async () => {
    const registry = new Registry();
    const metrics = new AgentMetrics(registry);
    const count = async (result: string): Promise<number | undefined> => (await registry.getSingleMetric("imp_agent_cache_clone_events_total")?.get())?.values.find((v) => v.labels["result"] === result)?.value;
    for (const result of ["attached", "unsupported", "failed", "promoted", "discarded"]) assert.equal(await count(result), 0, result);
    metrics.onRuntimeEvent({ kind: "cache", result: "attached" });
    metrics.onRuntimeEvent({ kind: "cache", result: "attached" });
    metrics.onRuntimeEvent({ kind: "cache", result: "promoted" });
    assert.equal(await count("attached"), 2);
    assert.equal(await count("promoted"), 1);
    assert.equal(await count("failed"), 0);
  });
});
