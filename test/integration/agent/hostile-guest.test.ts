/**
 * Hostile guests against a real node agent: a real API server, a real registry, real QEMU (TCG).
 * The agent's guest agent binary is guest/cmd/imp-hostile-guest (built here), which boots like the
 * real agent and then misbehaves as the VM's boot argument `imptest.hostile=<mode>` says; without it,
 * it serves the real protocol, so control VMs on the same agent run real workloads beside the hostile
 * ones. Each hostile VM must end Failed with a clear reason within a bound, the control VMs must
 * complete, the agent's memory must stay bounded, and nothing of any VM may remain on the host.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before, describe, it } from "node:test";
import { API_VERSION, FINALIZERS, type ImpVM, type ImpVMClass, IMP_VMS, IMP_VM_CLASSES, buildAllCrds } from "../../../src/api/index.ts";
import { DEFAULT_MAX_CONSOLE_BYTES } from "../../../src/agent/vmm/index.ts";
import { startControlPlane, type ControlPlane } from "../../../src/devcluster/index.ts";
import { createResourceClient, isNotFound, type ResourceClient, installCrds } from "../../../src/kube/index.ts";
import { waitFor } from "../../../src/shared/index.ts";
import { buildImage, busyboxLayer } from "../../harness/oci-image.ts";
import { bootKitPresent, processesMentioning, startTestAgent, type TestAgent } from "../../harness/node-agent.ts";
import { pushImage, startRegistry, type RunningRegistry } from "../../harness/registry.ts";

const repoRoot = resolve(import.meta.dirname, "../../..");
const VMS = IMP_VMS;
const CLASSES = IMP_VM_CLASSES;
const NS = "default";
const NODE = "node-hostile";
/** Under TCG on a loaded 2-core machine a boot takes 5–30 s (more with four VMs booting at once). */
const VM_DONE_MS = 300_000;
/** The agent's boot timeout (DEFAULT_RUNTIME_TIMEOUTS.bootMs, 120 s) plus the boot itself and slack. */
const SILENT_DONE_MS = 420_000;
/** The console limit at the rate a TCG guest writes its UART, with slack for a loaded machine. */
const FLOOD_DONE_MS = 900_000;

const goMissing = spawnSync("go", ["version"]).status !== 0;
const skip = !bootKitPresent() ? "the boot kit or guest agent is missing (run scripts/setup.sh)" : goMissing ? "go is not installed (needed to build guest/cmd/imp-hostile-guest)" : false;

describe("hostile guests: a real agent ends each misbehaving VM cleanly and nothing else", { timeout: 1_800_000, skip }, () => {
  let plane: ControlPlane;
  let registry: RunningRegistry;
  let agent: TestAgent;
  let vms: ResourceClient<ImpVM>;
  let image: string;
  let buildDir: string;
  let baselineRss = 0;
  let peakRss = 0;
  let sampler: NodeJS.Timeout | undefined;

  before(async () => {
    buildDir = await mkdtemp(join(tmpdir(), "imp-hostile-"));
    const binary = join(buildDir, "imp-hostile-guest");
    const build = spawnSync("nice", ["go", "build", "-trimpath", "-o", binary, "./cmd/imp-hostile-guest"], {
      cwd: join(repoRoot, "guest"),
      env: { ...process.env, CGO_ENABLED: "0" },
      encoding: "utf8",
    });
    assert.equal(build.status, 0, `go build failed: ${build.stderr}`);
    plane = await startControlPlane({ controllerManager: true });
    await installCrds(plane.kubeConfig, buildAllCrds());
    registry = await startRegistry();
    await pushImage(registry.url, "test/busybox", "1", buildImage([await busyboxLayer()]));
    image = `${registry.host}/test/busybox:1`;
    vms = createResourceClient<ImpVM>(plane.kubeConfig, VMS);
    await createResourceClient<ImpVMClass>(plane.kubeConfig, CLASSES).create({ apiVersion: API_VERSION, kind: "ImpVMClass", metadata: { name: "small" }, spec: { vcpu: 1, memoryMiB: 256, scratchDisk: "128Mi", arch: "amd64" } });
    agent = await startTestAgent({ kubeConfig: plane.kubeConfig, nodeName: NODE, capacity: { vcpu: 8, memoryMiB: 4096, vmSlots: 6 }, extraConfig: { guestAgent: binary } });
    // The agent runs in this process, so this process's RSS is the agent's memory.
    baselineRss = process.memoryUsage().rss;
    peakRss = baselineRss;
    sampler = setInterval(() => (peakRss = Math.max(peakRss, process.memoryUsage().rss)), 200);
    sampler.unref();
  });

  after(async () => {
    clearInterval(sampler);
    await agent?.dispose();
    await registry?.stop();
    await plane?.stop();
    if (buildDir !== undefined) await rm(buildDir, { recursive: true, force: true });
  });

  /** Creates an ImpVM with an inline template (optionally a hostile mode) and binds it to the node. */
  async function boundVm(name: string, command: string[], hostile?: string): Promise<ImpVM> {
    const created = await vms.create({
      apiVersion: API_VERSION,
      kind: "ImpVM",
      metadata: { name, namespace: NS },
      spec: {
        template: { classRef: { name: "small" }, image, kernel: "default", expireAfter: "1h", ...(hostile === undefined ? {} : { bootArgs: `imptest.hostile=${hostile}` }) },
        workload: { command },
        lifecycle: "ephemeral",
      },
    } as ImpVM);
    await vms.patchStatus({ namespace: NS, name }, { status: { phase: "Scheduled", nodeName: NODE, phaseTimestamps: { scheduled: new Date().toISOString() } } });
    return created;
  }

  const get = (name: string): Promise<ImpVM | undefined> => vms.get({ namespace: NS, name }).catch((err: unknown) => (isNotFound(err) ? undefined : Promise.reject(err)));

  async function waitForEnd(name: string, timeoutMs: number): Promise<ImpVM> {
    return waitFor(`ImpVM ${name} Succeeded or Failed`, async () => {
      const vm = await get(name);
      return vm !== undefined && ["Succeeded", "Failed"].includes(vm.status?.phase ?? "") ? vm : undefined;
    }, { timeoutMs, intervalMs: 250 }).catch((err: unknown) => {
      throw new Error(`${String(err)}; agent log tail: ${agent.logs().slice(-3000)}`);
    });
  }

  /** After the end: the agent released the VM (finalizer gone) and no process or directory of it remains. */
  async function assertReleasedAndGone(name: string): Promise<void> {
    const released = await waitFor(`ImpVM ${name} released by the agent`, async () => {
      const vm = await get(name);
      return vm?.status?.teardown?.completedAt !== undefined && !(vm.metadata.finalizers ?? []).includes(FINALIZERS.vmTeardown) ? vm : undefined;
    }, { timeoutMs: 90_000, intervalMs: 250 });
    assert.deepEqual({ ...released.status?.teardown, completedAt: undefined }, { processGone: true, resourcesReleased: true, completedAt: undefined }, name);
    const uid = released.metadata.uid ?? "";
    assert.deepEqual(await processesMentioning(uid), [], `no process of ${name} remains`);
    assert.equal(existsSync(agent.agent.runtime.vmDir(uid)), false, `the directory of ${name} is gone`);
  }

  /** Milliseconds from the Booting stamp (the VMM was started) to the terminal stamp. */
  const bootToEndMs = (vm: ImpVM): number => Date.parse(vm.status?.phaseTimestamps?.failed ?? vm.status?.phaseTimestamps?.succeeded ?? "") - Date.parse(vm.status?.phaseTimestamps?.booting ?? "");

  it("garbage frames, an oversized frame and a guest that never answers each end only their own VM", async () => {
    await boundVm("control-1", ["/bin/sh", "-c", "sleep 15; echo still fine"]);
    await boundVm("garbage", ["/bin/true"], "garbage");
    await boundVm("oversized", ["/bin/true"], "oversized");
    await boundVm("silent", ["/bin/true"], "silent");

    const garbage = await waitForEnd("garbage", VM_DONE_MS);
    assert.equal(garbage.status?.phase, "Failed", JSON.stringify(garbage.status));
    assert.equal(garbage.status?.reason, "GuestMisbehaved", JSON.stringify(garbage.status));
    assert.match(garbage.status?.message ?? "", /not UTF-8 JSON/);
    process.stdout.write(`# garbage frame: Booting → Failed in ${bootToEndMs(garbage)} ms\n`);

    const oversized = await waitForEnd("oversized", VM_DONE_MS);
    assert.equal(oversized.status?.phase, "Failed", JSON.stringify(oversized.status));
    assert.equal(oversized.status?.reason, "GuestMisbehaved", JSON.stringify(oversized.status));
    assert.match(oversized.status?.message ?? "", /declared length 4294967295 exceeds the limit of 1048576 bytes/);
    process.stdout.write(`# oversized frame: Booting → Failed in ${bootToEndMs(oversized)} ms\n`);

    const control = await waitForEnd("control-1", VM_DONE_MS);
    assert.equal(control.status?.phase, "Succeeded", `the control VM beside the hostile ones: ${JSON.stringify(control.status)}`);
    assert.equal(control.status?.exitCode, 0);

    const silent = await waitForEnd("silent", SILENT_DONE_MS);
    assert.equal(silent.status?.phase, "Failed", JSON.stringify(silent.status));
    assert.equal(silent.status?.reason, "BootTimeout", JSON.stringify(silent.status));
    assert.match(silent.status?.message ?? "", /no hello within 120000 ms/);
    process.stdout.write(`# silent guest: Booting → Failed in ${bootToEndMs(silent)} ms\n`);

    for (const name of ["garbage", "oversized", "control-1", "silent"]) await assertReleasedAndGone(name);
  });

  it("a guest flooding its serial console, or sending garbage while its workload runs, is stopped; the agent keeps running VMs", async () => {
    await boundVm("flood", ["/bin/sh", "-c", "sleep 3600"], "flood");
    await boundVm("late", ["/bin/sh", "-c", "sleep 3600"], "late");
    await boundVm("control-2", ["/bin/sh", "-c", "sleep 10; echo still fine"]);
    const late = await waitForEnd("late", VM_DONE_MS);
    assert.equal(late.status?.phase, "Failed", JSON.stringify(late.status));
    assert.ok(late.status?.phaseTimestamps?.running !== undefined, `the workload was running first: ${JSON.stringify(late.status)}`);
    assert.equal(late.status?.reason, "GuestMisbehaved", JSON.stringify(late.status));
    assert.match(late.status?.message ?? "", /not UTF-8 JSON/);
    process.stdout.write(`# garbage while running: Running → Failed in ${Date.parse(late.status?.phaseTimestamps?.failed ?? "") - Date.parse(late.status?.phaseTimestamps?.running ?? "")} ms\n`);
    const flood = await waitForEnd("flood", FLOOD_DONE_MS);
    assert.equal(flood.status?.phase, "Failed", JSON.stringify(flood.status));
    assert.equal(flood.status?.reason, "GuestMisbehaved", JSON.stringify(flood.status));
    const written = Number(/wrote (\d+) bytes to the serial console/.exec(flood.status?.message ?? "")?.[1] ?? Number.NaN);
    assert.ok(written > DEFAULT_MAX_CONSOLE_BYTES, `the message names the bytes written: ${flood.status?.message ?? ""}`);
    // Detection polls every 50 ms, so the console ends a little past the limit, not unbounded.
    assert.ok(written < DEFAULT_MAX_CONSOLE_BYTES + 16 * 1024 * 1024, `stopped near the limit: ${written} bytes`);
    process.stdout.write(`# console flood: ${written} bytes, Booting → Failed in ${bootToEndMs(flood)} ms\n`);
    const control = await waitForEnd("control-2", VM_DONE_MS);
    assert.equal(control.status?.phase, "Succeeded", JSON.stringify(control.status));
    for (const name of ["flood", "late", "control-2"]) await assertReleasedAndGone(name);
  });

  it("the agent's memory stayed bounded throughout", () => {
    const growthMiB = (peakRss - baselineRss) / 1024 / 1024;
    process.stdout.write(`# agent process RSS: baseline ${(baselineRss / 1024 / 1024).toFixed(0)} MiB, peak ${(peakRss / 1024 / 1024).toFixed(0)} MiB (+${growthMiB.toFixed(0)} MiB)\n`);
    // A decoder that buffered a declared 4 GiB frame, or a console kept in memory, would show here.
    assert.ok(growthMiB < 256, `peak RSS grew by ${growthMiB.toFixed(0)} MiB`);
  });
});
