/**
 * Memory snapshots through the Firecracker driver against the real v1.12.1 binary: a template VM is
 * paused and saved (`PATCH /vm`, `PUT /snapshot/create`), two VMs are restored from it at once
 * (`PUT /snapshot/load` with the memory file as backend, each with its own tap), and a damaged
 * snapshot is refused. The guest is the halting ELF of fixtures.ts: on this project's machines no
 * Linux guest runs under Firecracker (docs/firecracker.md), so what is proven here is the VMM's
 * side — files, paths, devices, descriptors — not a guest that answers after its restore.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync, readdirSync, readlinkSync, statSync } from "node:fs";
import { copyFile, mkdir, mkdtemp, open, rm, truncate } from "node:fs/promises";
import { join } from "node:path";
import { ImpError, silentLogger, systemClock } from "../../../src/shared/index.ts";
import { DirectLauncher } from "../../../src/agent/vmm/direct-launcher.ts";
import { FirecrackerDriver, type FirecrackerVm } from "../../../src/agent/vmm/firecracker/index.ts";
import type { DriverContext, VmSpec } from "../../../src/agent/vmm/types.ts";
import { binariesOrSkip, createTap, deleteTap, describeKvm, isSocket, kvmSituation, processAlive, tapState, uniqueName, vmFiles, type VmFiles } from "./fixtures.ts";

const context: DriverContext = { launcher: new DirectLauncher({ dieWithParent: true }), clock: systemClock, logger: silentLogger };

/** The halting kernel's code sits at guest-physical 16 MiB plus its ELF and program headers. */
const KERNEL_CODE_OFFSET = 0x100_0000 + 64 + 56;
const KERNEL_CODE = Buffer.from([0xfa, 0xf4, 0xeb, 0xfd]);

const sha256 = (path: string): string => createHash("sha256").update(readFileSync(path)).digest("hex");

/** Host files a process holds open, with whether each is open for reading only (`O_ACCMODE` 0). */
function openFiles(pid: number): Map<string, { readOnly: boolean }> {
  const files = new Map<string, { readOnly: boolean }>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    let target: string;
    try {
      target = readlinkSync(`/proc/${pid}/fd/${fd}`);
    } catch {
      continue;
    }
    if (!target.startsWith("/")) continue;
    const flags = /flags:\s+([0-7]+)/.exec(readFileSync(`/proc/${pid}/fdinfo/${fd}`, "utf8"))?.[1] ?? "";
    files.set(target, { readOnly: (Number.parseInt(flags, 8) & 3) === 0 });
  }
  return files;
}

/**
 * VM files laid out as the node agent lays them out: the VMM's own directory (`spec.dir`, where
 * Firecracker runs) inside the VM's, the disks beside it.
 */
async function agentLayoutFiles(options: { readonly tap?: string } = {}): Promise<VmFiles> {
  const files = await vmFiles(options);
  const vmmDir = join(files.dir, "vmm");
  await mkdir(vmmDir);
  return { ...files, spec: { ...files.spec, dir: vmmDir } };
}

interface VmConfig {
  drives: { drive_id: string; path_on_host: string }[];
  "network-interfaces": { host_dev_name: string; guest_mac: string }[];
  vsock: { uds_path: string; guest_cid: number };
}

async function vmConfig(vm: FirecrackerVm): Promise<VmConfig> {
  const answer = await vm.api.send({ method: "GET", path: "/vm/config", route: "/vm/config" });
  assert.equal(answer.status, 200, answer.body);
  return JSON.parse(answer.body) as VmConfig;
}

describe("Firecracker memory snapshots with the real binary", { timeout: 180_000 }, () => {
  it("saves a template and restores two VMs from it at once, each on its own disks, socket and tap, sharing one read-only memory file", async (t) => {
    const bins = binariesOrSkip(t);
    if (bins === undefined) return;
    if (kvmSituation() === "no-kvm") {
      t.skip(`${describeKvm()}: no template can run, so there is nothing to snapshot`);
      return;
    }
    t.diagnostic(`situation: ${describeKvm()}`);
    const driver = new FirecrackerDriver({ firecrackerBinary: bins.firecracker });
    assert.equal(driver.memorySnapshots, true);
    assert.equal(driver.restoreMapsMemoryReadOnly, true);
    assert.match(await driver.snapshotIdentity(), /^firecracker Firecracker v1\.12\.1 kvm$/);
    const snapshotDir = await mkdtemp("/tmp/imp-fcsnap-");
    const memoryFile = join(snapshotDir, "memory");
    const statePath = join(snapshotDir, "state");
    const taps = [uniqueName("imfs"), uniqueName("imfs"), uniqueName("imfs")];
    const vms: FirecrackerVm[] = [];
    const files: VmFiles[] = [];
    try {
      for (const tap of taps) await createTap(tap);
      const templateFiles = await agentLayoutFiles({ tap: taps[0]! });
      files.push(templateFiles);
      const template = await driver.start({ ...templateFiles.spec, memorySnapshot: { role: "template", memoryFile } }, context);
      vms.push(template);
      const templateConfig = await vmConfig(template);
      assert.deepEqual(templateConfig.drives.map((d) => d.path_on_host).sort(), ["../root.ext4", "../scratch.ext4"], "the template names its own disks relative to its directory");
      assert.equal(templateConfig.vsock.uds_path, "./vsock.sock");
      assert.ok(isSocket(join(templateFiles.spec.dir, "vsock.sock")));

      const saved = await template.saveSnapshot(statePath, { timeoutMs: 30_000 });
      t.diagnostic(`save (pause + full snapshot of ${templateFiles.spec.memoryMiB} MiB): ${saved.ms.toFixed(0)} ms; state ${saved.stateBytes} bytes`);
      assert.equal(template.running, false, "saving ends the template's Firecracker");
      assert.equal(isSocket(template.layout.host.apiSocket), false);
      assert.equal(saved.stateBytes, statSync(statePath).size);
      assert.ok(saved.stateBytes > 0);
      assert.equal(statSync(memoryFile).size, templateFiles.spec.memoryMiB * 1024 * 1024, "all guest memory is in the memory file");
      const code = Buffer.alloc(KERNEL_CODE.length);
      const handle = await open(memoryFile, "r");
      await handle.read(code, 0, code.length, KERNEL_CODE_OFFSET);
      await handle.close();
      assert.deepEqual(code, KERNEL_CODE, "the guest's memory (its kernel's code) is in the file where the guest had it");
      const memoryDigest = sha256(memoryFile);
      const stateDigest = sha256(statePath);

      const clones = await Promise.all(taps.slice(1).map(async (tap) => {
        const f = await agentLayoutFiles({ tap });
        files.push(f);
        const spec: VmSpec = { ...f.spec, memorySnapshot: { role: "restore", memoryFile, statePath } };
        const started = performance.now();
        const vm = await driver.start(spec, context);
        vms.push(vm);
        return { vm, files: f, tap, ms: performance.now() - started };
      }));
      for (const { vm, files: f, tap, ms } of clones) {
        t.diagnostic(`restore ${vm.spec.name}: spawn to Running ${ms.toFixed(0)} ms (${vm.bootTimings.map((s) => `${s.step} ${s.ms.toFixed(0)}`).join(", ")})`);
        assert.deepEqual(vm.bootTimings.map((s) => s.step), ["check-binaries", "claim-vm-files", "prepare-jail", "spawn", "wait-api", "configure-logging", "load-snapshot", "confirm-running"]);
        assert.equal((await vm.api.describeInstance()).state, "Running");
        const config = await vmConfig(vm);
        assert.equal(config["network-interfaces"][0]?.host_dev_name, tap, "the snapshot's tap was replaced by this VM's");
        assert.equal(await tapState(tap), "held", "this VM's Firecracker holds its own tap");
        assert.ok(isSocket(join(f.spec.dir, "vsock.sock")), "its guest channel's socket is in its own directory");
        const held = openFiles(vm.pid);
        assert.ok(held.has(join(f.dir, "root.ext4")) && held.has(join(f.dir, "scratch.ext4")), `its own disks: ${[...held.keys()].join(", ")}`);
        assert.ok(![...held.keys()].some((p) => p.startsWith(templateFiles.dir)), "nothing of the template's directory");
        assert.deepEqual(held.get(memoryFile), { readOnly: true }, "the shared memory file is open for reading only");
        assert.equal(held.get(join(f.dir, "scratch.ext4"))?.readOnly, false);
      }
      assert.equal(await tapState(taps[0]!), "free", "the template's tap is held by nothing");

      for (const { vm, files: f } of clones) {
        await vm.stop(500);
        assert.equal(processAlive(vm.pid), false);
        assert.equal(isSocket(join(f.spec.dir, "vsock.sock")), false, "its sockets are removed");
      }
      assert.equal(sha256(memoryFile), memoryDigest, "the restored VMs left the memory file as it was saved");
      assert.equal(sha256(statePath), stateDigest);
    } finally {
      for (const vm of vms) await vm.stop(500).catch(() => undefined);
      for (const tap of taps) await deleteTap(tap);
      for (const f of files) await f.remove();
      await rm(snapshotDir, { recursive: true, force: true });
    }
  });

  it("a damaged snapshot is refused with a terminal SnapshotLoadFailed in Firecracker's words; a missing disk is not blamed on the snapshot; neither leaves a process or socket", async (t) => {
    const bins = binariesOrSkip(t);
    if (bins === undefined) return;
    if (kvmSituation() === "no-kvm") {
      t.skip(`${describeKvm()}: no template can run, so there is nothing to snapshot`);
      return;
    }
    const driver = new FirecrackerDriver({ firecrackerBinary: bins.firecracker });
    const snapshotDir = await mkdtemp("/tmp/imp-fcsnap-");
    const memoryFile = join(snapshotDir, "memory");
    const statePath = join(snapshotDir, "state");
    const template = await agentLayoutFiles();
    const clones = [await agentLayoutFiles(), await agentLayoutFiles()];
    const firecrackerOf = (apiSocket: string): boolean =>
      readdirSync("/proc").filter((p) => /^\d+$/.test(p)).some((p) => {
        try {
          return readFileSync(`/proc/${p}/cmdline`, "utf8").includes(apiSocket);
        } catch {
          return false;
        }
      });
    try {
      const vm = await driver.start({ ...template.spec, memorySnapshot: { role: "template", memoryFile } }, context);
      await vm.saveSnapshot(statePath, { timeoutMs: 30_000 });

      const damaged = join(snapshotDir, "state-damaged");
      await copyFile(statePath, damaged);
      await truncate(damaged, Math.floor(statSync(statePath).size / 2));
      const spec: VmSpec = { ...clones[0]!.spec, memorySnapshot: { role: "restore", memoryFile, statePath: damaged } };
      const layout = driver.layoutOf(spec);
      await assert.rejects(driver.start(spec, context), (err: unknown) => {
        assert.ok(err instanceof ImpError, String(err));
        assert.equal(err.code, "SnapshotLoadFailed");
        assert.equal(err.errorClass, "terminal");
        assert.match(err.message, /Firecracker answered 400: Load snapshot error: .*Failed to get snapshot state from file.*CRC64 validation failed/);
        t.diagnostic(err.message);
        return true;
      });
      assert.equal(firecrackerOf(layout.host.apiSocket), false, "no Firecracker of the clone left");
      assert.equal(isSocket(layout.host.apiSocket), false, "no API socket left");
      assert.equal(isSocket(layout.host.vsockUds), false, "no vsock socket left");

      // The same good snapshot, but this VM's scratch disk is missing: the host's fault.
      await rm(join(clones[1]!.dir, "scratch.ext4"));
      const missing: VmSpec = { ...clones[1]!.spec, memorySnapshot: { role: "restore", memoryFile, statePath } };
      await assert.rejects(driver.start(missing, context), (err: unknown) => {
        assert.ok(err instanceof ImpError, String(err));
        assert.notEqual(err.code, "SnapshotLoadFailed", "a good snapshot is not blamed for a missing disk");
        assert.match(`${err.message} ${String((err.cause as Error | undefined)?.message ?? "")}`, /scratch\.ext4|BuildMicroVmError/);
        t.diagnostic(`missing disk: ${err.code}: ${err.message}`);
        return true;
      });
      assert.equal(firecrackerOf(driver.layoutOf(missing).host.apiSocket), false);
    } finally {
      await template.remove();
      for (const c of clones) await c.remove();
      await rm(snapshotDir, { recursive: true, force: true });
    }
  });
});
