/**
 * `startFrom: Snapshot` through the real node agent: a real API server, a real registry, real QEMU
 * (TCG) and the real guest agent. The class's first VM finds no snapshot, boots, and has a template
 * built beside it; the next VM is restored from that template and runs as itself (its own hostname,
 * set by the configure that follows the restore) and finds the daemon the image's
 * `/etc/imp/template-warm-up` started in the template still running, which a booted VM never runs;
 * a snapshot whose state file was damaged is
 * discarded and the VM boots instead, never failing for it; nothing of a template is left running.
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { API_VERSION, buildAllCrds, IMP_VMS, IMP_VM_CLASSES, type ImpVM, type ImpVMClass } from "../../../src/api/index.ts";
import { startControlPlane, type ControlPlane } from "../../../src/devcluster/index.ts";
import { createResourceClient, installCrds, isNotFound, type ResourceClient } from "../../../src/kube/index.ts";
import { waitFor } from "../../../src/shared/index.ts";
import { buildImage, buildLayer, busyboxLayer } from "../../harness/oci-image.ts";
import { bootKitPresent, processesMentioning, startTestAgent, supervisorPath, type TestAgent } from "../../harness/node-agent.ts";
import { pushImage, startRegistry, type RunningRegistry } from "../../harness/registry.ts";

const NS = "default";
const NODE = "node-snap";
/** Under TCG on a loaded 2-core machine a boot takes 5–30 s. */
const VM_DONE_MS = 240_000;
const skip = !bootKitPresent() ? "the boot kit or guest agent is missing (run scripts/setup.sh)" : !existsSync(supervisorPath) ? "imp-supervisor is missing (run scripts/setup.d/35-supervisor.sh)" : false;

describe("node agent: a startFrom: Snapshot class restores its VMs from the node's template", { timeout: 900_000, skip }, () => {
  let plane: ControlPlane;
  let registry: RunningRegistry;
  let agent: TestAgent;
  let vms: ResourceClient<ImpVM>;
  let image: string;

  before(async () => {
    plane = await startControlPlane({ controllerManager: true });
    await installCrds(plane.kubeConfig, buildAllCrds());
    registry = await startRegistry();
    // The image's template warm-up leaves a daemon running, as the Docker runner image's leaves dockerd.
    const warmUp = await buildLayer([
      { path: "etc/", type: "directory" },
      { path: "etc/imp/", type: "directory" },
      { path: "etc/imp/template-warm-up", content: Buffer.from("#!/bin/sh\nsleep 86400 </dev/null >/dev/null 2>&1 &\necho $! >/imp-warm-up.pid\n"), mode: 0o755 },
    ]);
    await pushImage(registry.url, "test/busybox", "1", buildImage([await busyboxLayer(), warmUp]));
    image = `${registry.host}/test/busybox:1`;
    vms = createResourceClient<ImpVM>(plane.kubeConfig, IMP_VMS);
    await createResourceClient<ImpVMClass>(plane.kubeConfig, IMP_VM_CLASSES).create({ apiVersion: API_VERSION, kind: "ImpVMClass", metadata: { name: "snap" }, spec: { vcpu: 1, memoryMiB: 512, scratchDisk: "256Mi", arch: "amd64", startFrom: "Snapshot" } });
    // Supervised: the production path (the template and the restored VMs each under their own supervisor).
    agent = await startTestAgent({ kubeConfig: plane.kubeConfig, nodeName: NODE, supervised: true });
  });

  after(async () => {
    await agent?.dispose();
    await registry?.stop();
    await plane?.stop();
  });

  /** The workload's check that the template's warm-up daemon runs in this VM (restored) or that it never ran (booted). */
  const WARMED = 'kill -0 "$(cat /imp-warm-up.pid)"';
  const NOT_WARMED = "test ! -e /imp-warm-up.pid";

  /** A VM that succeeds only if the guest's hostname is its own name (proof the restored VM was configured as itself) and `check` holds. */
  async function runVm(name: string, check: string): Promise<ImpVM> {
    await vms.create({
      apiVersion: API_VERSION,
      kind: "ImpVM",
      metadata: { name, namespace: NS },
      spec: { template: { classRef: { name: "snap" }, image, kernel: "default", expireAfter: "1h" }, workload: { command: ["/bin/sh", "-c", `test "$(cat /proc/sys/kernel/hostname)" = ${name} && ${check}`] }, lifecycle: "ephemeral" },
    } as ImpVM);
    await vms.patchStatus({ namespace: NS, name }, { status: { phase: "Scheduled", nodeName: NODE, phaseTimestamps: { scheduled: new Date().toISOString() } } });
    const ended = await waitFor(`ImpVM ${name} ended`, async () => {
      const vm = await vms.get({ namespace: NS, name }).catch((err: unknown) => (isNotFound(err) ? undefined : Promise.reject(err)));
      return vm?.status?.phase === "Succeeded" || vm?.status?.phase === "Failed" ? vm : undefined;
    }, { timeoutMs: VM_DONE_MS, intervalMs: 200 }).catch((err: unknown) => Promise.reject(new Error(`ImpVM ${name} did not end; the agent's last log lines:\n${agent.logs().slice(-3000)}`, { cause: err })));
    assert.equal(ended.status?.phase, "Succeeded", `${name}: ${ended.status?.reason ?? ""} ${ended.status?.message ?? ""}\n${agent.logs().slice(-3000)}`);
    durations.push(`${name} ${ended.status?.startedFrom ?? "?"} ${ended.status?.bootDurationMs ?? "?"} ms`);
    return ended;
  }

  const durations: string[] = [];
  /** Log lines of this agent that mention VM `name` and carry `msg`. */
  const logged = (name: string, msg: string): boolean =>
    agent.logs().split("\n").some((line) => line.includes(`"vm":"${NS}/${name}"`) && line.includes(`"msg":"${msg}"`));

  const snapshots = async (): Promise<string[]> => (await readdir(join(agent.stateDir, "snapshots")).catch(() => [] as string[])).filter((n) => /^[0-9a-f]{64}$/.test(n));
  const templateBuilt = (): Promise<string> =>
    waitFor("a memory snapshot of the class's template", async () => {
      const [key] = await snapshots();
      return key !== undefined && existsSync(join(agent.stateDir, "snapshots", key, "meta.json")) ? key : undefined;
    }, { timeoutMs: VM_DONE_MS, intervalMs: 250 });

  it("boots the first VM (no snapshot yet) and builds the template beside it", async () => {
    assert.equal((await runVm("snap-a", NOT_WARMED)).status?.startedFrom, "Boot");
    assert.ok(logged("snap-a", "no memory snapshot to restore; booting"), "the first VM did not look for a snapshot");
    await templateBuilt();
  });

  it("restores the next VM from the template, configured as itself, with the daemon its image's warm-up started in the template running", async () => {
    assert.equal((await runVm("snap-b", WARMED)).status?.startedFrom, "Snapshot");
    assert.ok(agent.logs().includes("ran in the template before its save"), "the template's warm-up was not reported as run");
    assert.ok(logged("snap-b", "restored from a memory snapshot"), `snap-b was not restored:\n${agent.logs().slice(-2000)}`);
  });

  it("discards a damaged snapshot and boots the VM instead; a new template follows", async () => {
    const [key] = await snapshots();
    assert.ok(key !== undefined);
    await writeFile(join(agent.stateDir, "snapshots", key, "state"), "not a device state");
    assert.equal((await runVm("snap-c", NOT_WARMED)).status?.startedFrom, "Boot");
    assert.ok(logged("snap-c", "no memory snapshot to restore; booting"), "snap-c did not fall back to a boot");
    assert.ok(agent.logs().includes("memory snapshot discarded"), "the damaged snapshot was not discarded");
    await templateBuilt();
    assert.equal((await runVm("snap-d", WARMED)).status?.startedFrom, "Snapshot");
    assert.ok(logged("snap-d", "restored from a memory snapshot"), "snap-d was not restored from the new template");
  });

  it("leaves no template VM behind: no process, no directory", async (t) => {
    t.diagnostic(`VMM start → guest agent answered: ${durations.join("; ")}`);
    // A supervisor reports its VMM's exit and then exits itself: under load that takes a moment
    // after the template was released, so its absence is awaited (bounded), not sampled once.
    const left = await waitFor("no template process", async () => ((await processesMentioning("/vms/tpl-")).length === 0 ? [] : undefined), { timeoutMs: 30_000, intervalMs: 200 }).catch(() => processesMentioning("/vms/tpl-"));
    const cmdlines = await Promise.all(left.map(async (pid) => `${pid}: ${(await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "(gone)")).replaceAll("\0", " ").slice(0, 300)}`));
    assert.deepEqual(left, [], `template processes left:\n${cmdlines.join("\n")}\n${agent.logs().slice(-3000)}`);
    assert.deepEqual((await readdir(join(agent.stateDir, "vms")).catch(() => [] as string[])).filter((n) => n.startsWith("tpl-")), []);
  });
});
