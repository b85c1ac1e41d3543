/**
 * The Firecracker driver against the real Firecracker v1.12.1 (scripts/setup.d/45-firecracker.sh):
 * every configuration request accepted, InstanceStart, the VM Running, Ctrl+Alt+Del then kill, the
 * exit detected, and nothing left. On a machine without /dev/kvm the same test ends at InstanceStart
 * with KvmUnavailable; a second test always takes that path, in a mount namespace that hides /dev/kvm.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { ImpError, silentLogger, systemClock } from "../../../src/shared/index.ts";
import { DirectLauncher } from "../../../src/agent/vmm/direct-launcher.ts";
import { configRequests, FirecrackerDriver, type FirecrackerVm } from "../../../src/agent/vmm/firecracker/index.ts";
import type { DriverContext, ProcessLauncher, VmmProcess } from "../../../src/agent/vmm/types.ts";
import {
  binariesOrSkip,
  createTap,
  deleteTap,
  describeKvm,
  isSocket,
  kvmSituation,
  processAlive,
  tapState,
  uniqueName,
  vmFiles,
  withoutKvm,
} from "./fixtures.ts";

const context: DriverContext = { launcher: new DirectLauncher({ dieWithParent: true }), clock: systemClock, logger: silentLogger };

function ms(n: number): string {
  return `${n.toFixed(1)} ms`;
}

/** Firecracker logs one line per request it executed; the log file stays in the VM directory. */
function executedRequests(logFile: string): number {
  return readFileSync(logFile, "utf8").split("\n").filter((l) => l.includes("The request was executed successfully. Status code: 204")).length;
}

describe("Firecracker driver with the real binary", { timeout: 180_000 }, () => {
  it("configures every device, starts the VM, stops it with Ctrl+Alt+Del then kill, and leaves nothing", async (t) => {
    const bins = binariesOrSkip(t);
    if (bins === undefined) return;
    const tap = uniqueName("imfc");
    await createTap(tap);
    const files = await vmFiles({ tap });
    const driver = new FirecrackerDriver({ firecrackerBinary: bins.firecracker });
    const layout = driver.layoutOf(files.spec);
    const situation = kvmSituation();
    t.diagnostic(`situation: ${describeKvm()} → ${situation === "kvm" ? "full run to Running and stop" : "ends at InstanceStart (KvmUnavailable)"}`);
    let vm: FirecrackerVm | undefined;
    try {
      if (situation === "no-kvm") {
        await assert.rejects(driver.start(files.spec, context), (err: unknown) => {
          assert.ok(err instanceof ImpError, String(err));
          assert.equal(err.code, "KvmUnavailable");
          assert.equal(err.errorClass, "terminal");
          return true;
        });
        assert.equal(executedRequests(layout.host.logFile), configRequests(files.spec, layout.vmm).length, "every configuration PUT answered 204 before InstanceStart");
      } else {
        vm = await driver.start(files.spec, context);
        for (const { step, ms: took } of vm.bootTimings) t.diagnostic(`boot step ${step}: ${ms(took)}`);
        // Logger, metrics, machine, boot source, 2 drives, network, vsock, entropy, InstanceStart: each a 204.
        assert.equal(executedRequests(layout.host.logFile), configRequests(files.spec, layout.vmm).length + 1);
        const info = await vm.api.describeInstance();
        assert.equal(info.state, "Running");
        assert.equal(info.vmm_version, "1.12.1");
        assert.equal(info.id, layout.id);
        assert.ok(processAlive(vm.pid));
        assert.ok(isSocket(layout.host.vsockUds), "the hybrid vsock socket exists");
        assert.equal(await tapState(tap), "held", "Firecracker holds the tap open");
        assert.equal(vm.downSignal.aborted, false);

        // The halting guest never listens on vsock: Firecracker's muxer takes the connection, no OK comes.
        await assert.rejects(vm.connectGuest({ timeoutMs: 1_500 }), (err: unknown) => err instanceof ImpError && err.code === "VsockDialTimeout" && err.errorClass === "retryable");

        const pid = vm.pid;
        const exit = await vm.stop(1_500);
        const stop = vm.stopped;
        t.diagnostic(`stop: exit after ${ms(stop?.exitMs ?? NaN)} (by ${stop?.rung}; kill to exit ${ms(stop?.killMs ?? NaN)}), cleanup ${ms(stop?.cleanupMs ?? NaN)}; ${JSON.stringify(exit)}`);
        assert.equal(stop?.rung, "killed", "a halted guest ignores Ctrl+Alt+Del, so the grace period ends in a kill");
        assert.ok(readFileSync(layout.host.logFile, "utf8").includes('with body "{\\"action_type\\":\\"SendCtrlAltDel\\"}"'), "Ctrl+Alt+Del was sent first");
        assert.deepEqual(await vm.exited(), exit);
        assert.equal(vm.downSignal.aborted, true);
        assert.equal((vm.downSignal.reason as ImpError).code, "FirecrackerExited");
        await assert.rejects(vm.connectGuest({ timeoutMs: 1_000 }), (err: unknown) => err instanceof ImpError && err.code === "FirecrackerExited");
        assert.deepEqual(await vm.stop(1_500), exit, "stop is idempotent");
        assert.equal(processAlive(pid), false);
        assert.equal(await tapState(tap), "free", "the tap is released");
      }
      assert.equal(isSocket(layout.host.apiSocket), false, "API socket removed");
      assert.equal(isSocket(layout.host.vsockUds), false, "vsock socket removed");
    } finally {
      await vm?.stop(500);
      await deleteTap(tap);
      await files.remove();
    }
    assert.equal(await tapState(tap), "absent");
  });

  it("where /dev/kvm is missing, every PUT is accepted and InstanceStart fails with a terminal KvmUnavailable, leaving nothing", async (t) => {
    const bins = binariesOrSkip(t);
    if (bins === undefined) return;
    t.diagnostic("simulated: Firecracker runs in a mount namespace whose /dev has no kvm node");
    const tap = uniqueName("imfc");
    await createTap(tap);
    const files = await vmFiles({ tap });
    const driver = new FirecrackerDriver({ firecrackerBinary: bins.firecracker });
    const layout = driver.layoutOf(files.spec);
    const failedSteps: string[] = [];
    const logger = silentLogger.child({});
    logger.warn = ((obj: { step?: string }) => {
      if (obj.step !== undefined) failedSteps.push(obj.step);
    }) as typeof logger.warn;
    try {
      await assert.rejects(driver.start(files.spec, { ...context, launcher: withoutKvm(context.launcher), logger }), (err: unknown) => {
        assert.ok(err instanceof ImpError, String(err));
        assert.equal(err.code, "KvmUnavailable");
        assert.equal(err.errorClass, "terminal");
        assert.match(err.message, /^Cannot start VM .*: this host offers no usable KVM \(Firecracker: .*Error creating KVM object: No such file or directory/);
        return true;
      });
      assert.deepEqual(failedSteps, ["instance-start"]);
      assert.equal(executedRequests(layout.host.logFile), configRequests(files.spec, layout.vmm).length);
      assert.equal(isSocket(layout.host.apiSocket), false);
      assert.equal(isSocket(layout.host.vsockUds), false);
      assert.equal(await tapState(tap), "free");
    } finally {
      await deleteTap(tap);
      await files.remove();
    }
  });

  it("accepts any readable file as boot source, and InstanceStart refuses a non-ELF kernel with Firecracker's own words", async (t) => {
    const bins = binariesOrSkip(t);
    if (bins === undefined) return;
    if (kvmSituation() === "no-kvm") {
      t.skip("no /dev/kvm: InstanceStart fails on KVM before it loads the kernel");
      return;
    }
    const files = await vmFiles({ kernel: Buffer.alloc(4096, "not a kernel\n") });
    const driver = new FirecrackerDriver({ firecrackerBinary: bins.firecracker });
    try {
      await assert.rejects(driver.start(files.spec, context), (err: unknown) => {
        assert.ok(err instanceof ImpError, String(err));
        assert.equal(err.code, "FirecrackerApiError");
        assert.equal(err.errorClass, "terminal");
        assert.match(err.message, /^Cannot PUT \/actions for VM .*: Firecracker answered 400: .*failed to load ELF kernel image: Kernel Loader: Invalid Elf magic number/);
        return true;
      });
      assert.equal(isSocket(driver.layoutOf(files.spec).host.apiSocket), false);
    } finally {
      await files.remove();
    }
  });

  it("refuses to start a second VMM on a VM directory whose API socket still answers", async (t) => {
    const bins = binariesOrSkip(t);
    if (bins === undefined) return;
    if (kvmSituation() === "no-kvm") {
      t.skip("no /dev/kvm: no VM can be running to collide with");
      return;
    }
    const files = await vmFiles();
    const driver = new FirecrackerDriver({ firecrackerBinary: bins.firecracker });
    let vm: FirecrackerVm | undefined;
    try {
      vm = await driver.start(files.spec, context);
      await assert.rejects(driver.start(files.spec, context), (err: unknown) => err instanceof ImpError && err.code === "VmAlreadyRunning" && err.errorClass === "terminal");
      assert.equal((await vm.api.describeInstance()).state, "Running", "the first VM is untouched");
    } finally {
      await vm?.stop(500);
      await files.remove();
    }
  });
});

describe("Firecracker driver failures during boot", { timeout: 120_000 }, () => {
  it("a VMM that dies before its API answers fails the start terminally with its last words, and nothing is left", async (t) => {
    const bins = binariesOrSkip(t);
    if (bins === undefined) return;
    const files = await vmFiles();
    try {
      // The real binary, refusing its arguments: `--api-sock` pointing into a directory that does not exist.
      const fake = join(files.dir, "firecracker");
      await writeFile(fake, `#!/bin/sh\nexec ${bins.firecracker} --api-sock /nonexistent/dir/api.sock\n`, { mode: 0o755 });
      const driver = new FirecrackerDriver({ firecrackerBinary: fake });
      await assert.rejects(driver.start(files.spec, context), (err: unknown) => {
        assert.ok(err instanceof ImpError, String(err));
        assert.equal(err.code, "FirecrackerStartFailed");
        assert.equal(err.errorClass, "terminal");
        assert.match(err.message, /Firecracker exited before its API answered \(exit status \d+\); it said: .+/);
        t.diagnostic(err.message);
        return true;
      });
      assert.equal(isSocket(driver.layoutOf(files.spec).host.apiSocket), false);
    } finally {
      await files.remove();
    }
  });

  it("an abort after the process started rolls everything back and rejects with the abort's reason", async (t) => {
    const bins = binariesOrSkip(t);
    if (bins === undefined) return;
    const files = await vmFiles();
    const controller = new AbortController();
    const launched: VmmProcess[] = [];
    const launcher: ProcessLauncher = {
      launch: async (request) => {
        const process = await context.launcher.launch(request);
        launched.push(process);
        controller.abort(new Error("node is draining"));
        return process;
      },
    };
    const driver = new FirecrackerDriver({ firecrackerBinary: bins.firecracker });
    try {
      await assert.rejects(driver.start(files.spec, { ...context, launcher }, controller.signal), /node is draining/);
      assert.equal(launched.length, 1);
      assert.equal(launched[0]?.running, false, "the process was stopped");
      assert.equal(processAlive(launched[0]?.pid ?? 0), false);
      assert.equal(isSocket(driver.layoutOf(files.spec).host.apiSocket), false);
    } finally {
      await files.remove();
    }
  });
});
