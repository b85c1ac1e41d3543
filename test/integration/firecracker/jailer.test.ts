/**
 * The Firecracker driver under the real jailer v1.12.1: chroot under a base directory, an unprivileged
 * uid/gid, a network namespace holding the VM's tap, resources hard-linked in, and the chroot removed
 * after the VM. On a machine without /dev/kvm the run ends at InstanceStart with KvmUnavailable, and
 * the chroot must be gone just the same.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync, statSync } from "node:fs";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { ImpError, silentLogger, systemClock } from "../../../src/shared/index.ts";
import { DirectLauncher } from "../../../src/agent/vmm/direct-launcher.ts";
import { FirecrackerDriver, type FirecrackerVm } from "../../../src/agent/vmm/firecracker/index.ts";
import type { DriverContext } from "../../../src/agent/vmm/types.ts";
import {
  binariesOrSkip,
  createNetns,
  createTap,
  deleteNetns,
  describeKvm,
  isSocket,
  kvmSituation,
  netnsExists,
  processAlive,
  processUid,
  tapState,
  uniqueName,
  vmFiles,
} from "./fixtures.ts";

const context: DriverContext = { launcher: new DirectLauncher({ dieWithParent: true }), clock: systemClock, logger: silentLogger };

describe("Firecracker driver under the real jailer", { timeout: 180_000 }, () => {
  it("runs the VM chrooted as an unprivileged user in its network namespace, and removes the chroot after", async (t) => {
    const bins = binariesOrSkip(t);
    if (bins === undefined) return;
    const uid = 23_000 + (process.pid % 1_000);
    const netnsName = uniqueName("imfcns");
    const netns = `/var/run/netns/${netnsName}`;
    const tap = uniqueName("imfcj");
    const base = await mkdtemp("/tmp/imp-jail-");
    await createNetns(netnsName);
    await createTap(tap, { user: uid, netns: netnsName });
    const files = await vmFiles({ tap });
    const driver = new FirecrackerDriver({
      firecrackerBinary: bins.firecracker,
      jailer: { binary: bins.jailer, chrootBaseDir: base, uid, gid: uid, netnsOf: () => netns },
    });
    const layout = driver.layoutOf(files.spec);
    const jail = layout.jail;
    assert.ok(jail !== undefined);
    const situation = kvmSituation();
    t.diagnostic(`situation: ${describeKvm()} → ${situation === "kvm" ? "full run to Running and stop" : "ends at InstanceStart (KvmUnavailable)"}`);
    let vm: FirecrackerVm | undefined;
    try {
      if (situation === "no-kvm") {
        await assert.rejects(driver.start(files.spec, context), (err: unknown) => err instanceof ImpError && err.code === "KvmUnavailable" && err.errorClass === "terminal");
      } else {
        vm = await driver.start(files.spec, context);
        for (const { step, ms } of vm.bootTimings) t.diagnostic(`boot step ${step}: ${ms.toFixed(1)} ms`);
        assert.equal((await vm.api.describeInstance()).state, "Running");
        assert.equal(processUid(vm.pid), uid, "Firecracker runs as the jail's uid");
        assert.equal(readFileSync(`/proc/${vm.pid}/cmdline`, "utf8").split("\0")[0], "/firecracker", "the jailer exec'd its copy inside the chroot, same pid");
        assert.notEqual(statSync(`/proc/${vm.pid}/ns/net`).ino, statSync("/proc/self/ns/net").ino, "it is in another network namespace");
        assert.equal(await tapState(tap, { netns: netnsName }), "held", "it holds the tap inside that namespace");
        assert.ok(isSocket(layout.host.vsockUds), "the vsock socket is inside the chroot");
        assert.ok(layout.host.vsockUds.startsWith(`${jail.root}/`));
        const scratch = files.spec.drives.find((d) => d.id === "scratch");
        assert.equal(statSync(scratch?.path ?? "").uid, uid, "the writable drive belongs to the jailed user");
        assert.equal(statSync(files.spec.kernel).uid, 0, "read-only resources keep their owner");
        assert.equal(statSync(join(jail.root, "drive-root")).ino, statSync(files.spec.drives[0]!.path).ino, "resources are hard links, not copies");

        const pid = vm.pid;
        const exit = await vm.stop(1_500);
        t.diagnostic(`stop: exit after ${vm.stopped?.exitMs.toFixed(1)} ms (by ${vm.stopped?.rung}; kill to exit ${vm.stopped?.killMs.toFixed(1)} ms), cleanup ${vm.stopped?.cleanupMs.toFixed(1)} ms; ${JSON.stringify(exit)}`);
        assert.equal(vm.stopped?.rung, "killed");
        assert.equal(processAlive(pid), false);
        assert.equal(await tapState(tap, { netns: netnsName }), "free");
        assert.ok(readFileSync(layout.host.logFile, "utf8").includes("SendCtrlAltDel"), "the log outlives the chroot (it lives in the VM directory)");
      }
      assert.equal(existsSync(jail.dir), false, `chroot ${jail.dir} removed`);
      assert.deepEqual(await readdir(join(base, "firecracker")).catch(() => []), [], "nothing else left under the chroot base");
      assert.ok(!readFileSync("/proc/self/mountinfo", "utf8").includes(base), "no mount of the chroot is visible on the host");
      assert.equal(isSocket(layout.host.apiSocket), false);
    } finally {
      await vm?.stop(500);
      await deleteNetns(netnsName);
      await files.remove();
      await rm(base, { recursive: true, force: true });
    }
    assert.equal(netnsExists(netnsName), false);
  });
});
