/**
 * The node agent end to end on one node: a real API server (with garbage collection), a real OCI
 * registry, images built by the agent, real QEMU (TCG) booting the real guest agent. The tests play
 * the operator: they bind ImpVMs to the node and, for runner VMs, seal the setup to the node's key.
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { readdir, readFile, stat } from "node:fs/promises";
import { createServer, type AddressInfo, type Socket } from "node:net";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { API_VERSION, FINALIZERS, sealSetup, type ImpNode, type ImpVM, type ImpVMClass, IMP_NODES, IMP_VMS, IMP_VM_CLASSES, buildAllCrds } from "../../../src/api/index.ts";
import { leaseNameOf } from "../../../src/agent/node/index.ts";
import { sealedInputsStatus } from "../../harness/sealed-inputs.ts";
import { startControlPlane, type ControlPlane } from "../../../src/devcluster/index.ts";
import { createResourceClient, EVENT_RESOURCE, isNotFound, LEASE_RESOURCE, type CoreEvent, type Lease, type ResourceClient, installCrds } from "../../../src/kube/index.ts";
import { FAULT_POINTS_ENV, waitFor } from "../../../src/shared/index.ts";
import { buildImage, busyboxLayer } from "../../harness/oci-image.ts";
import { bootKitPresent, processesMentioning, startTestAgent, supervisorPath, type TestAgent } from "../../harness/node-agent.ts";
import { pushImage, startRegistry, type RunningRegistry } from "../../harness/registry.ts";

const VMS = IMP_VMS;
const CLASSES = IMP_VM_CLASSES;
const NODES = IMP_NODES;
const NS = "default";
const SENTINEL = "jit-SENTINEL-7d41c09e";
/** Under TCG on a loaded 2-core machine a boot takes 5–30 s; everything else is quick. */
const VM_DONE_MS = 240_000;

/** The agent's fault points, armed to pass (delay 0) so each logs when reached: the runner test checks where they fire. */
const AGENT_POINTS = ["agent.prepare", "agent.boot", "agent.exec-sent", "agent.running", "agent.after-exit", "teardown.before-sealed-removal"];
process.env[FAULT_POINTS_ENV] = AGENT_POINTS.map((p) => `${p}=delay:0`).join(",");

/** Files under `dir` (recursively, raw bytes, sockets skipped) that contain `needle`. */
async function filesContaining(dir: string, needle: string): Promise<string[]> {
  const hits: string[] = [];
  const bytes = Buffer.from(needle);
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (!entry.isFile()) continue;
    const path = join(entry.parentPath, entry.name);
    const content = await readFile(path).catch(() => Buffer.alloc(0));
    if (content.includes(bytes)) hits.push(path);
  }
  return hits;
}

for (const supervised of [false, true]) {
const NODE = supervised ? "node-s" : "node-d";
const mode = supervised ? "VMMs under the per-VM supervisor" : "VMMs as direct children";
const skip = !bootKitPresent() ? "the boot kit or guest agent is missing (run scripts/setup.sh)" : supervised && !existsSync(supervisorPath) ? "imp-supervisor is missing (run scripts/setup.d/35-supervisor.sh)" : false;
describe(`node agent (${mode}): ImpVMs bound to the node, through to the end`, { timeout: 1_200_000, skip }, () => {
  let plane: ControlPlane;
  let registry: RunningRegistry;
  let agent: TestAgent;
  let vms: ResourceClient<ImpVM>;
  let image: string;

  before(async () => {
    plane = await startControlPlane({ controllerManager: true });
    await installCrds(plane.kubeConfig, buildAllCrds());
    registry = await startRegistry();
    await pushImage(registry.url, "test/busybox", "1", buildImage([await busyboxLayer()]));
    image = `${registry.host}/test/busybox:1`;
    vms = createResourceClient<ImpVM>(plane.kubeConfig, VMS);
    await createResourceClient<ImpVMClass>(plane.kubeConfig, CLASSES).create({ apiVersion: API_VERSION, kind: "ImpVMClass", metadata: { name: "small" }, spec: { vcpu: 1, memoryMiB: 512, scratchDisk: "256Mi", arch: "amd64" } });
    agent = await startTestAgent({ kubeConfig: plane.kubeConfig, nodeName: NODE, supervised });
  });

  after(async () => {
    await agent?.dispose();
    await registry?.stop();
    await plane?.stop();
  });

  /**
   * A VM with an inline template, bound to the node as the scheduler would; a runner VM (`runner`)
   * needs a one-time setup, as the pools' VMs do. `secrets`: its environment reads them (one
   * variable per key), sealed to the node as the operator's inputs controller would.
   */
  async function boundVm(name: string, command: string[], runner = false, secrets: Record<string, Record<string, string>> = {}, cache?: NonNullable<ImpVM["spec"]["cache"]>): Promise<ImpVM> {
    const env = Object.entries(secrets).flatMap(([secret, data]) => Object.keys(data).map((key) => ({ name: key.toUpperCase(), valueFrom: { secretKeyRef: { name: secret, key } } })));
    const created = await vms.create({
      apiVersion: API_VERSION,
      kind: "ImpVM",
      metadata: { name, namespace: NS, ...(runner ? { labels: { "imp.dev/pool": "pool-a" } } : {}) },
      spec: { template: { classRef: { name: "small" }, image, kernel: "default", expireAfter: "1h" }, workload: { command, ...(env.length === 0 ? {} : { env }) }, lifecycle: "ephemeral", ...(runner ? { runnerSetup: "Required" } : {}), ...(cache === undefined ? {} : { cache }) },
    } as ImpVM);
    const inputs = env.length === 0 ? {} : await sealedInputsStatus(plane.kubeConfig, NODE, created.metadata.uid ?? "", secrets);
    return vms.patchStatus({ namespace: NS, name }, { status: { phase: "Scheduled", nodeName: NODE, phaseTimestamps: { scheduled: new Date().toISOString() }, ...inputs } }).then(() => created);
  }

  const get = (name: string): Promise<ImpVM | undefined> => vms.get({ namespace: NS, name }).catch((err: unknown) => (isNotFound(err) ? undefined : Promise.reject(err)));

  /**
   * Waits for one of `phases`. A VM that ended in a phase not asked for never gets there: that fails
   * at once with its reason and the agent's last log lines, instead of waiting out the budget and
   * saying only that the phase never came.
   */
  /**
   * The last copy of each VM's serial console seen while waiting for it: the agent removes the VM's
   * directory when it ends, and a guest that never answered (BootTimeout, rare under load) is
   * explained only by where its boot stopped.
   */
  const consoles = new Map<string, string>();
  const consoleOf = (name: string): string => `\n--- the VM's serial console, last 3000 bytes ---\n${(consoles.get(name) ?? "(never read)").slice(-3000)}`;

  async function waitForPhase(name: string, phases: string[], timeoutMs = VM_DONE_MS): Promise<ImpVM> {
    let last = "not yet created";
    const explain = (): string => `ImpVM ${name} never reached ${phases.join("|")}; last seen ${last}. The agent's last log lines:\n${agent.logs().slice(-3000)}`;
    const seen = await waitFor(`ImpVM ${name} in ${phases.join("|")}`, async () => {
      const vm = await get(name);
      const phase = vm?.status?.phase ?? "";
      last = vm === undefined ? "gone" : `${phase || "no phase"}${vm.status?.reason === undefined ? "" : ` (${vm.status.reason}: ${vm.status.message ?? ""})`}`;
      if (vm?.metadata.uid !== undefined && (phase === "Booting" || phase === "Running")) {
        const text = await readFile(join(agent.stateDir, "vms", vm.metadata.uid, "vmm", "serial.log"), "utf8").catch(() => undefined);
        if (text !== undefined) consoles.set(name, text);
      }
      if (vm !== undefined && phases.includes(phase)) return { vm };
      return phase === "Succeeded" || phase === "Failed" ? { ended: true as const } : undefined;
    }, { timeoutMs, intervalMs: 200 }).catch((err: unknown) => Promise.reject(new Error(explain(), { cause: err })));
    if (!("vm" in seen)) throw new Error(explain());
    return seen.vm;
  }

  async function waitForReleased(name: string): Promise<ImpVM> {
    return waitFor(`ImpVM ${name} released by the agent`, async () => {
      const vm = await get(name);
      return vm?.status?.teardown?.completedAt !== undefined && !(vm.metadata.finalizers ?? []).includes(FINALIZERS.vmTeardown) ? vm : undefined;
    }, { timeoutMs: 60_000, intervalMs: 200 });
  }

  async function assertNothingLeft(vm: ImpVM): Promise<void> {
    const uid = vm.metadata.uid ?? "";
    assert.deepEqual(await processesMentioning(uid), [], "no process of the VM remains");
    assert.equal(existsSync(agent.agent.runtime.vmDir(uid)), false, "the VM directory is gone");
  }

  const publishedNode = (): Promise<ImpNode> =>
    waitFor("ImpNode with a setup key", () => createResourceClient<ImpNode>(plane.kubeConfig, NODES).get({ name: NODE }).then((n) => (n.status?.setupKey !== undefined ? n : undefined), () => undefined), { timeoutMs: 30_000 });
  const publishedKey = async (): Promise<NonNullable<NonNullable<ImpNode["status"]>["setupKey"]>> => {
    const key = (await publishedNode()).status?.setupKey;
    assert.ok(key !== undefined);
    return key;
  };

  it("publishes its ImpNode (capacity, accel and why, setup key) and renews its Lease", async () => {
    const node = await publishedNode();
    assert.equal(node.status?.accel, "tcg");
    assert.equal(node.status?.capacity?.vmSlots, 4);
    assert.match(node.status?.kvmReason ?? "", /\S/);
    assert.match(node.status?.setupKey?.keyId ?? "", /^[0-9a-f]{16}$/);
    const leases = createResourceClient<Lease>(plane.kubeConfig, LEASE_RESOURCE);
    const first = await leases.get({ namespace: NS, name: leaseNameOf(NODE) });
    const renewed = await waitFor("a renewed lease", async () => {
      const l = await leases.get({ namespace: NS, name: leaseNameOf(NODE) });
      return l.spec?.renewTime !== first.spec?.renewTime ? l : undefined;
    }, { timeoutMs: 30_000 });
    assert.equal(renewed.spec?.holderIdentity, NODE);
  });

  it("runs a workload to Succeeded with exit 0, phase timestamps and durations, then frees everything", async () => {
    await boundVm("ok-1", ["/bin/sh", "-c", "echo hello from the guest"]);
    const done = await waitForPhase("ok-1", ["Succeeded", "Failed"]);
    assert.equal(done.status?.phase, "Succeeded", `status: ${JSON.stringify(done.status)}${consoleOf("ok-1")}`);
    assert.equal(done.status?.exitCode, 0);
    assert.equal(done.status?.reason, "Completed");
    for (const p of ["preparing", "booting", "running", "succeeded"] as const) assert.ok(done.status?.phaseTimestamps?.[p] !== undefined, `timestamp ${p}`);
    assert.ok((done.status?.bootDurationMs ?? -1) > 0);
    assert.ok((done.status?.prepareDurationMs ?? -1) >= 0);
    assert.equal(done.status?.execId, `imp-run-${done.metadata.uid}`);
    const released = await waitForReleased("ok-1");
    assert.deepEqual({ ...released.status?.teardown, completedAt: undefined }, { processGone: true, resourcesReleased: true, completedAt: undefined });
    await assertNothingLeft(released);
  });

  it("a failing workload ends Failed with its exit code", async () => {
    await boundVm("fail-1", ["/bin/sh", "-c", "exit 3"]);
    const done = await waitForPhase("fail-1", ["Succeeded", "Failed"]);
    assert.equal(done.status?.phase, "Failed");
    assert.equal(done.status?.exitCode, 3);
    assert.equal(done.status?.reason, "ExitNonZero");
    await assertNothingLeft(await waitForReleased("fail-1"));
  });

  it("a VM whose environment reads a Secret gets the value its operator sealed to this node (agents read no Secret), and the sealed inputs leave the status when it ends", async () => {
    const pattern = `${SENTINEL.slice(0, 8)}""${SENTINEL.slice(8)}`;
    await boundVm("inputs-1", ["/bin/sh", "-c", `case "$TOKEN" in *${pattern}*) exit 0;; *) exit 9;; esac`], false, { creds: { token: `t-${SENTINEL}` } });
    const done = await waitForPhase("inputs-1", ["Succeeded", "Failed"]);
    assert.equal(done.status?.phase, "Succeeded", `the workload saw the sealed value: ${JSON.stringify(done.status)}`);
    const released = await waitForReleased("inputs-1");
    assert.equal(released.status?.inputs, undefined, "the sealed inputs left the status at release");
    assert.ok(!agent.logs().includes(SENTINEL), "the value never reaches the agent's log");
    await assertNothingLeft(released);
  });

  it("a runner VM gets its sealed setup in memory only: delivered once, removed from the status, never in a log", async () => {
    // The workload proves it received the setup under both names, without printing it. The pattern is
    // split by an empty quote so the sentinel itself appears nowhere in the VM's spec.
    const pattern = `${SENTINEL.slice(0, 8)}""${SENTINEL.slice(8)}`;
    const logsBefore = agent.logs().length;
    const vm = await boundVm("runner-1", ["/bin/sh", "-c", `sleep 3; test "$IMP_RUNNER_JITCONFIG" = "$ACTIONS_RUNNER_INPUT_JITCONFIG" && case "$IMP_RUNNER_JITCONFIG" in *${pattern}*) exit 0;; *) exit 9;; esac`], true);
    const key = await publishedKey();
    const sealed = await sealSetup(new TextEncoder().encode(`{"config":"${SENTINEL}"}`), key, vm.metadata.uid ?? "");
    const sealedJson = JSON.stringify(sealed);
    assert.ok(!sealedJson.includes(SENTINEL), "the API holds only ciphertext");
    await vms.patchStatus({ namespace: NS, name: "runner-1" }, { status: { setup: { state: "Minted", sealed: sealedJson } } });
    // While the job runs (it sleeps first), nothing on the node's disk holds the setup: not the VM
    // directory (sockets, console, logs) and not its disks, read raw.
    await waitForPhase("runner-1", ["Running"]);
    const dir = agent.agent.runtime.vmDir(vm.metadata.uid ?? "");
    assert.deepEqual(await filesContaining(dir, SENTINEL), [], "no file of the VM holds the setup");
    const done = await waitForPhase("runner-1", ["Succeeded", "Failed"]);
    assert.equal(done.status?.phase, "Succeeded", `the workload saw the setup under both names: ${JSON.stringify(done.status)}`);
    const released = await waitForReleased("runner-1");
    assert.equal(released.status?.setup?.state, "Deleted");
    assert.ok(released.status?.setup?.deliveredAt !== undefined);
    assert.equal(released.status?.setup?.sealed, undefined, "the sealed setup left the status when the VM ended");
    assert.ok(!agent.logs().includes(SENTINEL), "the setup never reaches the agent's log");
    assert.ok(!JSON.stringify(released).includes(SENTINEL), "nor the VM object");
    await assertNothingLeft(released);
    // The job timeline's booted and delivered points are Events on the VM, once each.
    const recorded = (await createResourceClient<CoreEvent>(plane.kubeConfig, EVENT_RESOURCE).list({ namespace: NS })).items.filter((e) => e.involvedObject.uid === vm.metadata.uid);
    for (const reason of ["Booted", "SetupDelivered"]) assert.deepEqual(recorded.filter((e) => e.reason === reason).map((e) => e.count), [1], `one ${reason} Event: ${recorded.map((e) => e.reason).join(", ")}`);
    assert.match(recorded.find((e) => e.reason === "Booted")?.message ?? "", new RegExp(`answered ${released.status?.bootDurationMs} ms after the VMM started`));
    // Each fault point of the runner path was passed, in the order of the path.
    const fired = agent.logs().slice(logsBefore).split("\n").filter((l) => l.includes("test fault point fired")).map((l) => (JSON.parse(l) as { point: string }).point);
    const from = fired.indexOf("agent.prepare");
    const firstAt = AGENT_POINTS.map((p) => fired.indexOf(p, from));
    assert.ok(from >= 0 && firstAt.every((i, k) => i >= 0 && (k === 0 || i > (firstAt[k - 1] ?? 0))), `fault points passed in path order: ${fired.join(" → ")}`);
  });

  it("deleting a Running VM stops it, verifies the process is gone, then lets the object go", async () => {
    const vm = await boundVm("del-1", ["/bin/sh", "-c", "sleep 600"]);
    await waitForPhase("del-1", ["Running"]);
    assert.ok((await processesMentioning(vm.metadata.uid ?? "")).length > 0, "the VMM runs");
    if (supervised) {
      const cgroup = `/sys/fs/cgroup/memory/imp/${NODE}/${vm.metadata.uid ?? ""}`;
      assert.ok(existsSync(cgroup), `the VM's memory cgroup ${cgroup} exists while it runs`);
    }
    await vms.delete({ namespace: NS, name: "del-1" });
    await waitFor("ImpVM del-1 gone", async () => ((await get("del-1")) === undefined ? true : undefined), { timeoutMs: 60_000, intervalMs: 200 });
    await assertNothingLeft(vm);
    if (supervised) assert.equal(existsSync(`/sys/fs/cgroup/memory/imp/${NODE}/${vm.metadata.uid ?? ""}`), false, "its cgroup is removed");
  });

  it("deleting a VM while it is Preparing (its image pull hangs) aborts the preparation and frees everything", async () => {
    // A registry that accepts connections and never answers: the pull waits until it is aborted.
    const held = new Set<Socket>();
    const silent = createServer((socket) => {
      held.add(socket);
      socket.on("error", () => undefined);
    });
    await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
    const port = (silent.address() as AddressInfo).port;
    try {
      const vm = await vms.create({
        apiVersion: API_VERSION,
        kind: "ImpVM",
        metadata: { name: "del-prep", namespace: NS },
        spec: { template: { classRef: { name: "small" }, image: `127.0.0.1:${port}/never/answers:1`, kernel: "default", expireAfter: "1h" }, workload: { command: ["/bin/true"] }, lifecycle: "ephemeral" },
      } as ImpVM);
      await vms.patchStatus({ namespace: NS, name: "del-prep" }, { status: { phase: "Scheduled", nodeName: NODE } });
      await waitForPhase("del-prep", ["Preparing"], 60_000).catch((err: unknown) => {
        throw new Error(`${String(err)}; agent log tail: ${agent.logs().slice(-3000)}`);
      });
      await vms.delete({ namespace: NS, name: "del-prep" });
      await waitFor("ImpVM del-prep gone", async () => ((await get("del-prep")) === undefined ? true : undefined), { timeoutMs: 60_000, intervalMs: 200 });
      await assertNothingLeft(vm);
    } finally {
      for (const socket of held) socket.destroy();
      silent.close();
    }
  });

  it("deleting a runner VM while it is Booting (waiting for its setup) stops the VMM and frees everything", async () => {
    const vm = await boundVm("del-boot", ["/bin/true"], true);
    await waitFor("del-boot waiting for its setup", async () => {
      const v = await get("del-boot");
      return v?.status?.phase === "Booting" && v.status.bootDurationMs !== undefined ? v : undefined;
    }, { timeoutMs: VM_DONE_MS, intervalMs: 200 });
    assert.ok((await processesMentioning(vm.metadata.uid ?? "", "qemu")).length > 0, "the VMM runs");
    await vms.delete({ namespace: NS, name: "del-boot" });
    await waitFor("ImpVM del-boot gone", async () => ((await get("del-boot")) === undefined ? true : undefined), { timeoutMs: 60_000, intervalMs: 200 });
    await assertNothingLeft(vm);
  });

  it("VMs of one cache volume each get their own clone of its generation, mounted at its paths before the workload; a clone's writes leave with its VM", async () => {
    const cache = { volume: `vol-${NODE}`, size: "128Mi", paths: ["/var/cache/imp-test", "/opt/tools/cache"] };
    // Exit codes say which check failed: 11 a path is not on the clone's ext4, 12 the clone held
    // another VM's file, 13 the write failed.
    const script = (me: string): string[] => ["/bin/sh", "-c", [
      "for p in /var/cache/imp-test /opt/tools/cache; do grep -q \"^/dev/vdc $p ext4 \" /proc/mounts || exit 11; done",
      `for f in /var/cache/imp-test/*; do [ -e "$f" ] || continue; exit 12; done`,
      `echo ${me} > /var/cache/imp-test/${me} && echo ${me} > /opt/tools/cache/${me} || exit 13`,
    ].join("; ")];
    // Two at once: the node has no generation of this volume yet, and both ask for it.
    await Promise.all([boundVm("cache-1", script("cache-1"), false, {}, cache), boundVm("cache-2", script("cache-2"), false, {}, cache)]);
    for (const name of ["cache-1", "cache-2"]) {
      const done = await waitForPhase(name, ["Succeeded", "Failed"]);
      assert.equal(done.status?.phase, "Succeeded", `${name} exit ${done.status?.exitCode}: ${JSON.stringify(done.status)}\nagent log:\n${agent.logs().slice(-3000)}`);
    }
    // A third, after both ended: nothing promotes yet, so it starts from the same empty generation.
    await boundVm("cache-3", script("cache-3"), false, {}, cache);
    const third = await waitForPhase("cache-3", ["Succeeded", "Failed"]);
    assert.equal(third.status?.phase, "Succeeded", `cache-3 exit ${third.status?.exitCode}`);
    const dir = join(agent.stateDir, "caches", NS, cache.volume, String(128 * 1024 * 1024));
    const files = (await readdir(dir)).filter((n) => n !== "held");
    assert.deepEqual(files, ["gen-0000000000000-empty.raw"], "one generation for two VMs asking at once, and no partial file");
    assert.equal((await stat(join(dir, files[0] ?? ""))).mode & 0o777, 0o400);
    for (const name of ["cache-1", "cache-2", "cache-3"]) await assertNothingLeft(await waitForReleased(name));
    // Each clone waits for the operator's decision past its VM: its clone, its generation link, its record.
    assert.equal((await readdir(join(dir, "held"))).length, 9);
  });

  it("a held clone becomes the volume's next generation on the operator's Promote and is deleted on its Discard or when its VM goes; later VMs see only the promoted writes", async () => {
    const cache = { volume: `pvol-${NODE}`, size: "128Mi", paths: ["/var/cache/imp-test"] };
    const write = (file: string): string[] => ["/bin/sh", "-c", `grep -q "^/dev/vdc /var/cache/imp-test ext4 " /proc/mounts || exit 11; echo ${file} > /var/cache/imp-test/${file} || exit 13`];
    const decide = async (name: string, promotion: Record<string, string>): Promise<ImpVM> => {
      await vms.patchStatus({ namespace: NS, name }, { status: { cache: { promotion } } });
      return waitFor(`${name}'s clone settled`, async () => {
        const vm = await get(name);
        return vm?.status?.cache?.result === undefined ? undefined : vm;
      }, { timeoutMs: 60_000, intervalMs: 200 }).catch((err: unknown) => Promise.reject(new Error(`${String(err)}\nagent log:\n${agent.logs().slice(-3000)}`)));
    };
    await boundVm("promo-1", write("kept"), false, {}, cache);
    assert.equal((await waitForPhase("promo-1", ["Succeeded", "Failed"])).status?.phase, "Succeeded");
    await waitForReleased("promo-1");
    const completedAt = new Date().toISOString().replace(/\.\d+Z$/, "Z");
    const promoted = await decide("promo-1", { decision: "Promote", reason: "Trusted", jobCompletedAt: completedAt });
    assert.equal(promoted.status?.cache?.result, "Promoted");
    assert.match(promoted.status?.cache?.generation ?? "", new RegExp(`^${String(Date.parse(completedAt)).padStart(13, "0")}-`));

    await boundVm("promo-2", write("dropped"), false, {}, cache);
    assert.equal((await waitForPhase("promo-2", ["Succeeded", "Failed"])).status?.phase, "Succeeded");
    await waitForReleased("promo-2");
    assert.equal((await decide("promo-2", { decision: "Discard", reason: "UntrustedEvent" })).status?.cache?.result, "Discarded");

    // 12: the promoted file is missing or wrong; 14: the discarded job's file is there.
    await boundVm("promo-3", ["/bin/sh", "-c", "[ \"$(cat /var/cache/imp-test/kept)\" = kept ] || exit 12; [ ! -e /var/cache/imp-test/dropped ] || exit 14"], false, {}, cache);
    const third = await waitForPhase("promo-3", ["Succeeded", "Failed"]);
    assert.equal(third.status?.phase, "Succeeded", `promo-3 exit ${third.status?.exitCode} (12: the promoted write is missing, 14: the discarded write is there)`);
    await waitForReleased("promo-3");
    const dir = join(agent.stateDir, "caches", NS, cache.volume, String(128 * 1024 * 1024));
    assert.deepEqual((await readdir(dir)).filter((n) => n.startsWith("gen-")), ["gen-0000000000000-empty.raw", `gen-${promoted.status?.cache?.generation ?? ""}.raw`]);
    assert.deepEqual((await readdir(join(dir, "held"))).sort(), [`${third.metadata.uid ?? ""}.json`, `${third.metadata.uid ?? ""}.qcow2`, `${third.metadata.uid ?? ""}.raw`], "promo-3's clone waits for its decision (clone, generation link, record)");
    await vms.delete({ namespace: NS, name: "promo-3" });
    await waitFor("promo-3's clone deleted with its VM", async () => ((await readdir(join(dir, "held"))).length === 0 ? true : undefined), { timeoutMs: 60_000, intervalMs: 200 });
    for (const name of ["promo-1", "promo-2"]) await vms.delete({ namespace: NS, name });
  });

  it("SIGKILL of the VMM ends the VM Failed with VmmExited", async () => {
    const vm = await boundVm("kill-1", ["/bin/sh", "-c", "sleep 600"]);
    await waitForPhase("kill-1", ["Running"]);
    const pids = await processesMentioning(`${vm.metadata.uid ?? ""}/vmm`, "qemu");
    assert.ok(pids.length > 0);
    const killedAt = Date.now();
    for (const pid of pids) process.kill(pid, "SIGKILL");
    const done = await waitForPhase("kill-1", ["Succeeded", "Failed"], 30_000);
    const seenMs = Date.parse(done.status?.phaseTimestamps?.failed ?? "") - killedAt;
    assert.equal(done.status?.phase, "Failed");
    assert.equal(done.status?.reason, "VmmExited");
    process.stdout.write(`# VMM SIGKILL → status Failed stamped after ${seenMs} ms\n`);
    await assertNothingLeft(await waitForReleased("kill-1"));
  });
});
}
