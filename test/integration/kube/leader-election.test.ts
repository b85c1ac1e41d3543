import { spawn, type ChildProcess } from "node:child_process";
import { copyFile, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { startControlPlane, type ControlPlane } from "../../../src/devcluster/index.ts";
import {
  DEFAULT_LEADER_ELECTION,
  Informer,
  LEASE_RESOURCE,
  createResourceClient,
  type KubeObject,
  type Lease,
  type LeaderElectionTimings,
} from "../../../src/kube/index.ts";

const childScript = fileURLToPath(new URL("./elector-child.fixture.ts", import.meta.url));
// The crash handover runs with the shipped defaults (what production gets); the freeze and release
// cases use shorter timings only to keep the suite quick.
const SHORT: LeaderElectionTimings = { leaseDurationMs: 8_000, renewDeadlineMs: 5_000, retryPeriodMs: 1_000 };

interface ChildEvent {
  readonly event: string;
  readonly identity: string;
  readonly at: number;
  readonly reason?: string;
}

interface Candidate {
  readonly proc: ChildProcess;
  readonly events: ChildEvent[];
  next(event: string, timeoutMs: number): Promise<ChildEvent>;
}

function spawnCandidate(kubeconfigPath: string, identity: string, lease: string, timings: LeaderElectionTimings): Candidate {
  const { leaseDurationMs, renewDeadlineMs, retryPeriodMs } = timings;
  const proc = spawn(
    process.execPath,
    [childScript, kubeconfigPath, identity, "default", lease, String(leaseDurationMs), String(renewDeadlineMs), String(retryPeriodMs)],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  const events: ChildEvent[] = [];
  const waiters: Array<() => void> = [];
  createInterface({ input: proc.stdout! }).on("line", (line) => {
    events.push(JSON.parse(line) as ChildEvent);
    for (const wake of waiters.splice(0)) wake();
  });
  const next = (event: string, timeoutMs: number): Promise<ChildEvent> =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`Cannot see ${identity} reach "${event}": nothing within ${timeoutMs} ms (saw ${JSON.stringify(events)})`)), timeoutMs);
      const check = (): void => {
        const found = events.find((e) => e.event === event);
        if (found !== undefined) {
          clearTimeout(timer);
          resolve(found);
        } else waiters.push(check);
      };
      check();
    });
  return { proc, events, next };
}

const exited = (proc: ChildProcess): Promise<void> =>
  proc.exitCode !== null || proc.signalCode !== null ? Promise.resolve() : new Promise((resolve) => proc.once("exit", () => resolve()));

describe("leader election between two processes", () => {
  let plane: ControlPlane;
  // The children read their own copy of the kubeconfig, so nothing depends on the plane's directory layout.
  let ownDir = "";
  let kubeconfig = "";
  const children: ChildProcess[] = [];
  // Runs beside the election tests (which take well over 30 s) to check the informer's defaults
  // against client-node's 30 s watch inactivity timeout on a namespace where nothing happens.
  const quiet = { stop: new AbortController(), startedAt: 0, running: Promise.resolve(), informer: undefined as Informer<KubeObject> | undefined };
  before(async () => {
    plane = await startControlPlane({ controllerManager: false });
    ownDir = await mkdtemp(join(tmpdir(), "imp-kube-election-"));
    kubeconfig = join(ownDir, "kubeconfig");
    await copyFile(plane.kubeconfigPath, kubeconfig);
    const informer = new Informer<KubeObject>({
      client: createResourceClient<KubeObject>(plane.kubeConfig, { group: "", version: "v1", plural: "configmaps", kind: "ConfigMap", namespaced: true }),
      namespace: "kube-public",
    });
    quiet.informer = informer;
    quiet.startedAt = Date.now();
    quiet.running = informer.start(quiet.stop.signal);
  });
  after(async () => {
    quiet.stop.abort();
    await quiet.running;
    for (const child of children) child.kill("SIGKILL");
    await Promise.all(children.map(exited));
    await plane?.stop();
    if (ownDir !== "") await rm(ownDir, { recursive: true, force: true });
  });

  it("hands over within 15 s with the shipped defaults after the leader is SIGKILLed without releasing", async () => {
    const timings = DEFAULT_LEADER_ELECTION;
    const a = spawnCandidate(kubeconfig, "candidate-a", "handover", timings);
    children.push(a.proc);
    await a.next("leading", 60_000);
    const b = spawnCandidate(kubeconfig, "candidate-b", "handover", timings);
    children.push(b.proc);
    await b.next("ready", 60_000);
    // Let b observe a renewing for a while: it must not take over a live leader.
    await new Promise((resolve) => setTimeout(resolve, timings.leaseDurationMs + 2 * timings.retryPeriodMs));
    assert.equal(b.events.some((e) => e.event === "leading"), false, "b must not lead while a renews");

    const killedAt = Date.now();
    a.proc.kill("SIGKILL");
    await exited(a.proc);
    const leading = await b.next("leading", 30_000);
    const handoverMs = leading.at - killedAt;
    console.log(
      `leader election handover after SIGKILL: ${handoverMs} ms (shipped defaults ${timings.leaseDurationMs}/${timings.renewDeadlineMs}/${timings.retryPeriodMs} ms)`,
    );
    assert.ok(handoverMs < 15_000, `handover took ${handoverMs} ms`);

    const leases = createResourceClient<Lease>(plane.kubeConfig, LEASE_RESOURCE);
    const lease = await leases.get({ namespace: "default", name: "handover" });
    assert.equal(lease.spec?.holderIdentity, "candidate-b");
    assert.equal(lease.spec?.leaseTransitions, 1);
  });

  it("a frozen leader (SIGSTOP) is replaced, and steps down as soon as it runs again", async () => {
    const a = spawnCandidate(kubeconfig, "frozen-a", "freeze", SHORT);
    children.push(a.proc);
    await a.next("leading", 60_000);
    const b = spawnCandidate(kubeconfig, "frozen-b", "freeze", SHORT);
    children.push(b.proc);
    await b.next("ready", 60_000);
    await new Promise((resolve) => setTimeout(resolve, 2 * SHORT.retryPeriodMs));
    a.proc.kill("SIGSTOP");
    const frozenAt = Date.now();
    const leading = await b.next("leading", 30_000);
    console.log(`leader election handover from a frozen leader: ${leading.at - frozenAt} ms`);
    a.proc.kill("SIGCONT");
    const stopped = await a.next("stopped", 30_000);
    assert.equal(stopped.reason, "lost");
    const leases = createResourceClient<Lease>(plane.kubeConfig, LEASE_RESOURCE);
    assert.equal((await leases.get({ namespace: "default", name: "freeze" })).spec?.holderIdentity, "frozen-b", "the resumed leader did not take the lease back");
  });

  it("hands over at once when the leader stops cleanly and releases the lease", async () => {
    // A long lease, so "before it would have expired" holds however slowly loaded children run.
    const LONG: LeaderElectionTimings = { leaseDurationMs: 60_000, renewDeadlineMs: 40_000, retryPeriodMs: 1_000 };
    const a = spawnCandidate(kubeconfig, "graceful-a", "release", LONG);
    children.push(a.proc);
    await a.next("leading", 60_000);
    const b = spawnCandidate(kubeconfig, "graceful-b", "release", LONG);
    children.push(b.proc);
    await b.next("ready", 60_000);
    const stoppedAt = Date.now();
    a.proc.kill("SIGTERM");
    const stopped = await a.next("stopped", 30_000);
    assert.equal(stopped.reason, "stopped");
    const leading = await b.next("leading", 30_000);
    console.log(`leader election handover after release: ${leading.at - stoppedAt} ms`);
    assert.ok(leading.at - stoppedAt < LONG.leaseDurationMs, `a released lease is taken before it would have expired (${leading.at - stoppedAt} ms)`);
  });

  it("keeps a quiet informer's watch healthy past client-node's 30 s inactivity timeout", async () => {
    const informer = quiet.informer;
    assert.ok(informer !== undefined);
    const remaining = 40_000 - (Date.now() - quiet.startedAt);
    if (remaining > 0) await new Promise((resolve) => setTimeout(resolve, remaining));
    const stats = informer.stats();
    console.log(`quiet informer over ${Math.round((Date.now() - quiet.startedAt) / 1000)} s: ${JSON.stringify(stats)}`);
    assert.equal(stats.failures, 0, "no watch ended in an error (client-side timeout or otherwise)");
    assert.equal(stats.lists, 1);
    assert.ok(stats.watches >= 2, "the server ended at least one watch on schedule and it was resumed");
    assert.equal(informer.health(75_000).status, "ok");
  });
});
