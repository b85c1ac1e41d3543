/**
 * A crashed node agent (SIGKILL) and its restart: VMMs run under their supervisors, so the VM keeps
 * running; the new agent re-adopts it, reconnects to the guest, asks for the one exec (never sends it
 * again) and reports its end. An exit that happens while no agent runs is reported after it returns.
 */
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { API_VERSION, GROUP, IMP_VM, IMP_VM_CLASS, VERSION, installCrds, type ImpVM, type ImpVMClass } from "../../../src/api/index.ts";
import { startControlPlane, type ControlPlane } from "../../../src/devcluster/index.ts";
import { createResourceClient, resourceDescriptor, type ResourceClient } from "../../../src/kube/index.ts";
import { waitFor } from "../../../src/shared/index.ts";
import { buildImage, busyboxLayer } from "../../harness/oci-image.ts";
import { bootKitPresent, processesMentioning, supervisorPath } from "../../harness/node-agent.ts";
import { pushImage, startRegistry, type RunningRegistry } from "../../harness/registry.ts";

const VMS = resourceDescriptor({ group: GROUP, version: VERSION, ...IMP_VM });
const NODE = "node-r";
const NS = "default";
const skip = !bootKitPresent() ? "the boot kit or guest agent is missing (run scripts/setup.sh)" : !existsSync(supervisorPath) ? "imp-supervisor is missing (run scripts/setup.d/35-supervisor.sh)" : false;

describe("node agent restart: supervised VMs are re-adopted, never re-run", { timeout: 900_000, skip }, () => {
  let plane: ControlPlane;
  let registry: RunningRegistry;
  let vms: ResourceClient<ImpVM>;
  let image: string;
  let stateDir: string;
  const children: ChildProcess[] = [];

  before(async () => {
    plane = await startControlPlane({ controllerManager: false });
    await installCrds(plane.kubeConfig);
    registry = await startRegistry();
    await pushImage(registry.url, "test/busybox", "1", buildImage([await busyboxLayer()]));
    image = `${registry.host}/test/busybox:1`;
    vms = createResourceClient<ImpVM>(plane.kubeConfig, VMS);
    await createResourceClient<ImpVMClass>(plane.kubeConfig, resourceDescriptor({ group: GROUP, version: VERSION, ...IMP_VM_CLASS })).create({ apiVersion: API_VERSION, kind: "ImpVMClass", metadata: { name: "small" }, spec: { vcpu: 1, memoryMiB: 512, scratchDisk: "256Mi", arch: "amd64" } });
    stateDir = await mkdtemp(join(tmpdir(), "imp-agent-restart-"));
  });

  after(async () => {
    for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
    // A last agent in this process releases whatever is left (and its supervisors).
    for (const pid of await processesMentioning(stateDir)) process.kill(pid, "SIGKILL");
    await rm(stateDir, { recursive: true, force: true });
    await registry?.stop();
    await plane?.stop();
  });

  function startAgent(): { child: ChildProcess; log: () => string } {
    let log = "";
    const child = spawn(process.execPath, [join(import.meta.dirname, "agent-child.fixture.ts")], {
      env: { ...process.env, IMP_TEST_KUBECONFIG: plane.kubeconfigPath, IMP_TEST_NODE: NODE, IMP_TEST_STATE_DIR: stateDir },
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stdout?.on("data", (c: Buffer) => (log += c.toString("utf8")));
    child.stderr?.on("data", (c: Buffer) => (log += c.toString("utf8")));
    children.push(child);
    return { child, log: () => log };
  }

  async function kill(child: ChildProcess): Promise<void> {
    const gone = new Promise((r) => child.once("exit", r));
    child.kill("SIGKILL");
    await gone;
  }

  async function boundVm(name: string, script: string): Promise<ImpVM> {
    const vm = await vms.create({ apiVersion: API_VERSION, kind: "ImpVM", metadata: { name, namespace: NS }, spec: { template: { classRef: { name: "small" }, image, kernel: "default", expireAfter: "1h" }, workload: { command: ["/bin/sh", "-c", script] }, lifecycle: "ephemeral" } } as ImpVM);
    await vms.patchStatus({ namespace: NS, name }, { status: { phase: "Scheduled", nodeName: NODE } });
    return vm;
  }

  const phaseOf = async (name: string): Promise<ImpVM> => vms.get({ namespace: NS, name });
  const waitPhase = (name: string, phases: string[], timeoutMs = 240_000): Promise<ImpVM> =>
    waitFor(`${name} in ${phases.join("|")}`, async () => {
      const vm = await phaseOf(name);
      return phases.includes(vm.status?.phase ?? "") ? vm : undefined;
    }, { timeoutMs, intervalMs: 200 });

  it("SIGKILL of the agent while a VM runs: the restarted agent re-adopts it, the one exec completes, no second exec", async () => {
    const first = startAgent();
    const vm = await boundVm("survive-1", "sleep 12; echo done");
    const uid = vm.metadata.uid ?? "";
    await waitPhase("survive-1", ["Running"]);
    await kill(first.child);
    assert.ok((await processesMentioning(uid, "qemu")).length > 0, "QEMU outlives the agent");
    const killedAt = Date.now();
    const second = startAgent();
    await waitFor("the VM re-adopted", () => (second.log().includes("re-adopted a running VM") ? true : undefined), { timeoutMs: 120_000, intervalMs: 200 });
    process.stdout.write(`# agent restart → VM re-adopted in ${Date.now() - killedAt} ms (includes the new agent's start)\n`);
    const consoleText = await readFile(join(stateDir, "vms", uid, "vmm", "serial.log"), "utf8").catch(() => "");
    const done = await waitPhase("survive-1", ["Succeeded", "Failed"]);
    assert.equal(done.status?.phase, "Succeeded", JSON.stringify(done.status));
    assert.equal(done.status?.exitCode, 0);
    const starts = consoleText.split("\n").filter((l) => l.includes('msg="exec starting"') && l.includes(`imp-run-${uid}`));
    assert.equal(starts.length, 1, "the guest started the workload exactly once");
    await waitFor("released", async () => ((await phaseOf("survive-1")).status?.teardown?.completedAt !== undefined ? true : undefined), { timeoutMs: 60_000, intervalMs: 200 });
    assert.deepEqual(await processesMentioning(uid), []);
    await kill(second.child);
  });

  it("an exit while no agent runs is reported, with its code, once the agent is back", async () => {
    const first = startAgent();
    const vm = await boundVm("away-1", "sleep 5; exit 5");
    const uid = vm.metadata.uid ?? "";
    await waitPhase("away-1", ["Running"]);
    await kill(first.child);
    await waitFor("the VM ended on its own", async () => ((await processesMentioning(uid, "qemu")).length === 0 ? true : undefined), { timeoutMs: 120_000, intervalMs: 200 });
    assert.equal((await phaseOf("away-1")).status?.phase, "Running", "no agent reported anything meanwhile");
    const second = startAgent();
    const done = await waitPhase("away-1", ["Succeeded", "Failed"], 120_000);
    assert.equal(done.status?.phase, "Failed");
    assert.equal(done.status?.exitCode, 5, JSON.stringify(done.status));
    await waitFor("released", async () => ((await phaseOf("away-1")).status?.teardown?.completedAt !== undefined ? true : undefined), { timeoutMs: 60_000, intervalMs: 200 });
    assert.deepEqual(await processesMentioning(uid), []);
    await kill(second.child);
  });
});
