/**
 * The checker against real parts: a real API server, the GitHub test server and a node's real host
 * state, with the traces a broken teardown would leave (a registration and a sealed setup of a VM
 * that ended, its directory and disk, a one-time setup presented twice). The checker must find each
 * one — and, once they are gone, report every invariant held with the time it took.
 */
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { API_VERSION, LABELS, type ImpVM, buildAllCrds } from "../../src/api/index.ts";
import { startControlPlane, type ControlPlane } from "../../src/devcluster/index.ts";
import { createResourceClient, type KubeObject, type ResourceClient, installCrds } from "../../src/kube/index.ts";
import { IMP_VMS } from "../../src/operator/index.ts";
import { startGitHub } from "../github/harness.ts";
import { checkInvariants, observe, type FaultWorld } from "./invariants.ts";

const NS = "fault-check";
const NAMESPACES = { group: "", version: "v1", plural: "namespaces", kind: "Namespace", namespaced: false } as const;

describe("checkInvariants on a real API server, GitHub test server and node", { timeout: 300_000 }, () => {
  let plane: ControlPlane;
  let vms: ResourceClient<ImpVM>;

  before(async () => {
    plane = await startControlPlane({ controllerManager: false });
    await installCrds(plane.kubeConfig, buildAllCrds());
    vms = createResourceClient<ImpVM>(plane.kubeConfig, IMP_VMS);
    await createResourceClient<KubeObject>(plane.kubeConfig, NAMESPACES).create({ apiVersion: "v1", kind: "Namespace", metadata: { name: NS } });
  });

  after(async () => {
    await plane?.stop();
  });

  async function runnerVm(name: string, phases: string[]): Promise<ImpVM> {
    const created = await vms.create({
      apiVersion: API_VERSION,
      kind: "ImpVM",
      metadata: { name, namespace: NS, labels: { [LABELS.pool]: "pool" } },
      spec: { template: { classRef: { name: "small" }, image: "127.0.0.1:5000/test/busybox:1", kernel: "default", expireAfter: "1h" }, workload: { command: ["/runner/run.sh"] }, lifecycle: "ephemeral" },
    } as ImpVM);
    for (const phase of phases) await vms.patchStatus({ namespace: NS, name }, { status: { phase, nodeName: "node-x", ...(phase === "Succeeded" ? { exitCode: 0, reason: "Completed" } : {}) } });
    return created;
  }

  it("finds a double setup use, a registration, a sealed setup and node files of an ended VM; all held once they are gone", async (t) => {
    const gh = await startGitHub(t);
    const stateDir = await mkdtemp(join(tmpdir(), "imp-fault-check-"));
    t.after(() => rm(stateDir, { recursive: true, force: true }));
    const world: FaultWorld = { kubeConfig: plane.kubeConfig, namespace: NS, github: gh.server, nodes: [{ nodeName: "node-x", stateDir, cgroupParent: `imp-fault-check-${process.pid}/node-x` }] };

    const live = await runnerVm("pool-aaaaa", ["Scheduled", "Preparing", "Booting", "Running"]);
    const ended = await runnerVm("pool-bbbbb", ["Scheduled", "Preparing", "Booting", "Running", "Succeeded"]);
    const { runner: liveRunner } = gh.server.registerRunner("repo:acme/api", { name: "pool-aaaaa", runner_group_id: 1, labels: ["imp"] });
    const { runner: endedRunner } = gh.server.registerRunner("repo:acme/api", { name: "pool-bbbbb", runner_group_id: 1, labels: ["imp"] });
    await vms.patchStatus({ namespace: NS, name: "pool-bbbbb" }, { status: { setup: { state: "Delivered", sealed: "{}" } } });
    const endedDir = join(stateDir, "vms", ended.metadata.uid ?? "");
    await mkdir(endedDir, { recursive: true });
    await writeFile(join(endedDir, "scratch.ext4"), Buffer.alloc(4096));
    // The live runner comes online with its one-time setup; then the same setup is presented again.
    const session = (): Promise<Response> =>
      fetch(`${gh.server.url}/_imp-test/runner/sessions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ runnerId: liveRunner.id, runnerName: liveRunner.name, secret: liveRunner.secret }) });
    assert.equal((await session()).status, 201);
    assert.equal((await session()).status, 409);

    const rounds: number[] = [];
    for (let i = 0; i < 5; i++) {
      const started = performance.now();
      await observe(world);
      rounds.push(Math.round(performance.now() - started));
    }
    console.log(`# one observation (API lists, GitHub state, /proc scan, node files, ip link, nft): ${rounds.join(", ")} ms`);
    const broken = new Map((await checkInvariants(world, { boundsMs: { I2: 1_500, I3: 1_500, I4: 1_500, I5: 1_500 }, minWatchMs: 1_500, intervalMs: 200 })).map((o) => [o.id, o]));
    assert.equal(broken.get("I1")?.held, false, broken.get("I1")?.detail);
    assert.match(broken.get("I1")?.detail ?? "", /409/);
    assert.equal(broken.get("I2")?.held, true, `the live VM is Running with its runner online: ${broken.get("I2")?.detail ?? ""}`);
    assert.equal(broken.get("I3")?.held, false);
    assert.match(broken.get("I3")?.detail ?? "", new RegExp(`pool-bbbbb \\(id ${endedRunner.id}`));
    assert.doesNotMatch(broken.get("I3")?.detail ?? "", /pool-aaaaa/);
    assert.equal(broken.get("I4")?.held, false);
    assert.match(broken.get("I4")?.detail ?? "", /pool-bbbbb \(VM Succeeded: setup\)/);
    assert.equal(broken.get("I5")?.held, false);
    assert.match(broken.get("I5")?.detail ?? "", new RegExp(`disk ${ended.metadata.uid ?? ""}: vms/.*/scratch\\.ext4`));
    assert.match(broken.get("I5")?.detail ?? "", /vm-dir/);
    assert.equal(broken.get("I6")?.held, true);

    // Teardown done right: registration removed, sealed setup removed, files gone. Counting only from now on, all hold.
    const faultAt = Date.now();
    gh.server.runners.delete(endedRunner.id);
    await vms.patchStatus({ namespace: NS, name: "pool-bbbbb" }, { status: { setup: { state: "Deleted", sealed: null } } } as never);
    await rm(endedDir, { recursive: true, force: true });
    const healed = await checkInvariants(world, { faultAt, since: faultAt, boundsMs: { I2: 30_000, I3: 30_000, I4: 30_000, I5: 30_000 }, intervalMs: 200 });
    for (const o of healed) assert.equal(o.held, true, `${o.id}: ${o.detail}`);
    assert.ok(healed.filter((o) => o.withinMs !== undefined).every((o) => (o.withinMs ?? -1) >= 0));
    assert.equal(live.metadata.name, "pool-aaaaa");
  });
});
