import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { startControlPlane, type ControlPlane } from "../../../src/devcluster/index.ts";
import { Informer, LEASE_RESOURCE, createResourceClient, type KubeObject, type Lease } from "../../../src/kube/index.ts";

const childScript = fileURLToPath(new URL("./elector-child.fixture.ts", import.meta.url));
// Short timings so the test is quick; the same code runs with client-go's 15/10/2 s defaults.
const LEASE_MS = 8_000;
const RENEW_MS = 5_000;
const RETRY_MS = 1_000;

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

function spawnCandidate(plane: ControlPlane, identity: string, lease: string): Candidate {
  const proc = spawn(
    process.execPath,
    [childScript, plane.kubeconfigPath, identity, "default", lease, String(LEASE_MS), String(RENEW_MS), String(RETRY_MS)],
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
  const children: ChildProcess[] = [];
  // Runs beside the election tests (which take well over 30 s) to check the informer's defaults
  // against client-node's 30 s watch inactivity timeout on a namespace where nothing happens.
  const quiet = { stop: new AbortController(), startedAt: 0, running: Promise.resolve(), informer: undefined as Informer<KubeObject> | undefined };
  before(async () => {
    plane = await startControlPlane({ controllerManager: false });
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
  });

  it("hands over within 15 s after the leader is SIGKILLed without releasing", async () => {
    const a = spawnCandidate(plane, "candidate-a", "handover");
    children.push(a.proc);
    await a.next("leading", 60_000);
    const b = spawnCandidate(plane, "candidate-b", "handover");
    children.push(b.proc);
    await b.next("ready", 60_000);
    // Let b observe a renewing for a while: it must not take over a live leader.
    await new Promise((resolve) => setTimeout(resolve, LEASE_MS + 2 * RETRY_MS));
    assert.equal(b.events.some((e) => e.event === "leading"), false, "b must not lead while a renews");

    const killedAt = Date.now();
    a.proc.kill("SIGKILL");
    await exited(a.proc);
    const leading = await b.next("leading", 30_000);
    const handoverMs = leading.at - killedAt;
    console.log(`leader election handover after SIGKILL: ${handoverMs} ms (lease ${LEASE_MS} ms, retry ${RETRY_MS} ms)`);
    assert.ok(handoverMs < 15_000, `handover took ${handoverMs} ms`);

    const leases = createResourceClient<Lease>(plane.kubeConfig, LEASE_RESOURCE);
    const lease = await leases.get({ namespace: "default", name: "handover" });
    assert.equal(lease.spec?.holderIdentity, "candidate-b");
    assert.equal(lease.spec?.leaseTransitions, 1);
  });

  it("a frozen leader (SIGSTOP) is replaced, and steps down as soon as it runs again", async () => {
    const a = spawnCandidate(plane, "frozen-a", "freeze");
    children.push(a.proc);
    await a.next("leading", 60_000);
    const b = spawnCandidate(plane, "frozen-b", "freeze");
    children.push(b.proc);
    await b.next("ready", 60_000);
    await new Promise((resolve) => setTimeout(resolve, 2 * RETRY_MS));
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
    const a = spawnCandidate(plane, "graceful-a", "release");
    children.push(a.proc);
    await a.next("leading", 60_000);
    const b = spawnCandidate(plane, "graceful-b", "release");
    children.push(b.proc);
    await b.next("ready", 60_000);
    const stoppedAt = Date.now();
    a.proc.kill("SIGTERM");
    const stopped = await a.next("stopped", 30_000);
    assert.equal(stopped.reason, "stopped");
    const leading = await b.next("leading", 30_000);
    console.log(`leader election handover after release: ${leading.at - stoppedAt} ms`);
    assert.ok(leading.at - stoppedAt < LEASE_MS, "a released lease is taken before it would have expired");
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
