import assert from "node:assert/strict";
import { test } from "node:test";
import { API_VERSION, type ImpVM } from "../../api/index.ts";
import type { Stored } from "../../kube/index.ts";
import { findReplacement, formatJobTimeline, jobTimeline } from "./timeline.ts";

const T0 = Date.UTC(2026, 11, 3, 8, 0, 0);
const iso = (offsetMs: number): string => new Date(T0 + offsetMs).toISOString();

function vm(name: string, status: ImpVM["status"]): Stored<ImpVM> {
  return { apiVersion: API_VERSION, kind: "ImpVM", metadata: { name, namespace: "ns", uid: `uid-${name}`, creationTimestamp: iso(0).replace(/\.\d{3}Z$/, "Z") }, spec: { lifecycle: "ephemeral" }, ...(status === undefined ? {} : { status }) };
}

const cold = vm("p-cold1", {
  phase: "Succeeded",
  exitCode: 0,
  nodeName: "node-a",
  phaseTimestamps: { pending: iso(1_100), scheduled: iso(1_300), preparing: iso(1_350), booting: iso(1_900), running: iso(2_800), succeeded: iso(9_000) },
  prepareDurationMs: 500,
  bootDurationMs: 700,
  setup: { state: "Deleted", mintedAt: iso(1_600), deliveredAt: iso(2_800) },
  teardown: { processGone: true, resourcesReleased: true, completedAt: iso(9_400) },
});
const replacement = vm("p-next1", { phase: "Running", nodeName: "node-b", setup: { state: "Delivered", deliveredAt: iso(4_500) } });

test("a cold job's timeline lists every point in order with the time between them", () => {
  const t = jobTimeline(cold, { queuedAt: new Date(T0 + 1_000).toISOString(), startedAt: T0 + 3_000, completedAt: T0 + 8_900 }, replacement);
  assert.deepEqual(
    t.points.map((p) => [p.point, p.sincePreviousMs, p.sinceQueuedMs]),
    [
      ["queued", undefined, 0],
      ["vm_created", 100, 100],
      ["vm_bound", 200, 300],
      ["setup_minted", 300, 600],
      ["disk_ready", 250, 850], // preparing + prepareDurationMs
      ["booted", 750, 1_600], // booting + bootDurationMs
      ["setup_delivered", 200, 1_800],
      ["job_started", 200, 2_000],
      ["replacement_online", 1_500, 3_500], // the pool replaced the busy runner before the job ended
      ["job_finished", 4_400, 7_900],
      ["cleaned", 500, 8_400],
    ],
  );
  assert.equal(t.warm, false);
  assert.equal(t.startupMs, 2_000);
  assert.equal(t.executionMs, 5_900);
  assert.equal(t.vmReadyMs, 1_700);
  assert.deepEqual(t.missing, []);
  assert.equal(t.node, "node-a");
  assert.equal(t.points[0]?.label, "queued");
});

test("a warm job's runner was online before the job was queued: points before it are negative from queued, never negative steps", () => {
  const t = jobTimeline(cold, { queuedAt: T0 + 2_900, startedAt: T0 + 3_000, completedAt: T0 + 8_900 });
  assert.equal(t.warm, true);
  assert.equal(t.startupMs, 100);
  assert.deepEqual(t.points.map((p) => p.point).slice(5, 8), ["setup_delivered", "queued", "job_started"]);
  assert.equal(t.points.find((p) => p.point === "vm_bound")?.sinceQueuedMs, -1_600);
  assert.ok(t.points.every((p) => p.sincePreviousMs === undefined || p.sincePreviousMs >= 0));
  assert.deepEqual(t.missing, ["replacement_online"]);
});

test("without the GitHub job, the VM's own points remain; the finish comes from the VM; older VMs fall back to the SetupReady condition", () => {
  const old = vm("p-old01", {
    phase: "Running",
    nodeName: "node-a",
    phaseTimestamps: { scheduled: iso(200), booting: iso(1_000) },
    conditions: [{ type: "SetupReady", status: "True", reason: "Minted", message: "", lastTransitionTime: iso(500) }],
  });
  const t = jobTimeline(old);
  assert.deepEqual(
    t.points.map((p) => [p.point, p.at - T0]),
    [
      ["vm_created", 0], // creationTimestamp, no phaseTimestamps.pending
      ["vm_bound", 200],
      ["setup_minted", 500],
      ["disk_ready", 1_000], // no prepareDurationMs: the VMM start
    ],
  );
  assert.deepEqual(t.missing, ["queued", "booted", "setup_delivered", "job_started", "job_finished", "cleaned", "replacement_online"]);
  assert.equal(t.warm, undefined);
  assert.equal(t.points[0]?.sinceQueuedMs, undefined);
  assert.equal(jobTimeline(cold).points.find((p) => p.point === "job_finished")?.at, T0 + 9_000);
});

test("the printed timeline has one line per point and names what is missing", () => {
  const lines = formatJobTimeline(jobTimeline(cold, { queuedAt: T0 + 1_000, startedAt: T0 + 3_000 }));
  assert.equal(lines[0], "job timeline of VM p-cold1 on node-a (cold)");
  assert.equal(lines[1], "  queued                  +0.000 s");
  assert.equal(lines[3], "  VM bound                +0.300 s   (+0.200 s after VM created)");
  assert.equal(lines.at(-1), "  not recorded: replacement online");
  assert.equal(lines.length, 1 + 10 + 1);
});

test("the replacement is the first other VM of the same pool created once the job started", () => {
  const inPool = (name: string, createdMs: number, pool = "p", namespace = "ns"): Stored<ImpVM> => ({
    ...vm(name, { phaseTimestamps: { pending: iso(createdMs) } }),
    metadata: { name, namespace, uid: name, labels: { "imp.dev/pool": pool } },
  });
  const ran = { ...inPool("p-ran01", 0), status: { ...cold.status } };
  const candidates = [ran, inPool("p-idle2", 500), inPool("p-late3", 9_000), inPool("p-next4", 3_200), inPool("q-other", 3_100, "q"), inPool("p-elsewh", 3_050, "p", "other-ns")];
  assert.equal(findReplacement(ran, candidates, T0 + 3_000)?.metadata.name, "p-next4");
  assert.equal(findReplacement(ran, candidates)?.metadata.name, "p-next4", "without the job: after the runner came online (T0+2.8 s)");
  assert.equal(findReplacement(ran, candidates, T0 + 10_000), undefined, "none created after the job started");
});
