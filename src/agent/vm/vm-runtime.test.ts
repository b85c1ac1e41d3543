/**
 * The VM lifecycle (boot, setup handoff, end, stop, release, re-adoption, outcomes after the fact)
 * on the fake VMM driver: real guest protocol over a Unix socket, real console following, real VM
 * record and exit records, no VM. Time that the runtime waits on is a FakeClock.
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { appendFile, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { FakeClock, silentLogger } from "../../shared/index.ts";
import { FakeVmmDriver, type FakeVmScript } from "../vmm/fake/fake-driver.ts";
import type { FakeWorkload } from "../vmm/fake/fake-guest.ts";
import type { VmExit, VmmProcess, VmSpec } from "../vmm/index.ts";
import { exitRecordLine, newExitRecordKey } from "../guest/index.ts";
import type { LocalVm } from "./local-vm.ts";
import type { VmBootRequest, VmImageSource } from "./ports.ts";
import { VmDir } from "./vm-dir.ts";
import { MemorySetupStore } from "./memory-setup-store.ts";
import type { VmRef } from "./ports.ts";
import { VmRuntime } from "./vm-runtime.ts";

const work = await mkdtemp(join(tmpdir(), "imp-vm-runtime-"));
after(() => rm(work, { recursive: true, force: true }));

const images: VmImageSource = {
  ensure: async () => ({ key: "k", path: join(work, "base.img"), sizeBytes: 1 }),
  disks: async (dir) => {
    await writeFile(join(dir, "base.ext4"), "");
    await writeFile(join(dir, "scratch.ext4"), "");
    return { base: join(dir, "base.ext4"), scratch: join(dir, "scratch.ext4"), scratchMethod: "sparse" };
  },
};

interface World {
  readonly runtime: VmRuntime;
  readonly driver: FakeVmmDriver;
  readonly clock: FakeClock;
  readonly stateDir: string;
  readonly sent: string[];
  readonly notified: string[];
  /** Resolves once the VM's local record satisfies `check` (the runtime notifies on every change). */
  until(uid: string, check: (l: LocalVm) => boolean): Promise<LocalVm>;
}

let worlds = 0;

/** A runtime on the fake driver; `scripts` by VM name. Pass `from` to restart an agent on the same node. */
async function world(scripts: Record<string, FakeVmScript> = {}, from?: World): Promise<World> {
  const clock = from?.clock ?? new FakeClock();
  const stateDir = from?.stateDir ?? join(work, `node-${worlds++}`);
  const driver = from?.driver ?? new FakeVmmDriver({ clock, script: (spec: VmSpec) => scripts[spec.name] ?? {} });
  const setups = new MemorySetupStore();
  const sent = setups.sent;
  const notified: string[] = [];
  const waiters = new Set<() => void>();
  const runtime: VmRuntime = new VmRuntime({
    stateDir,
    images,
    launch: {
      drivers: new Map([["qemu", driver]]),
      launcherFor: () => ({ launch: () => Promise.reject(new Error("the fake driver launches nothing")) }),
      adoptProcesses: async (dir): Promise<readonly VmmProcess[]> => {
        const vm = driver.vms.get(dir.vmm());
        return vm === undefined ? [] : [vm.process];
      },
      allocateCid: () => 3,
      releaseCid: () => undefined,
    },
    setups,
    notify: (vm) => {
      notified.push(vm.name);
      for (const w of [...waiters]) w();
    },
    maxConsoleBytes: 16 * 1024 * 1024,
    clock,
    logger: silentLogger,
    timeouts: { bootMs: 5_000, requestMs: 5_000, powerOffMs: 1_000, stopGraceMs: 100 },
  });
  const until = (uid: string, check: (l: LocalVm) => boolean): Promise<LocalVm> =>
    new Promise((resolve, reject) => {
      const deadline = setTimeout(() => {
        waiters.delete(look);
        reject(new Error(`VM ${uid} never got there; it is ${JSON.stringify(runtime.local(uid))}`));
      }, 20_000);
      const look = (): void => {
        const l = runtime.local(uid);
        if (l !== undefined && check(l)) {
          clearTimeout(deadline);
          waiters.delete(look);
          resolve(l);
        }
      };
      waiters.add(look);
      look();
    });
  return { runtime, driver, clock, stateDir, sent, notified, until };
}

let vmCount = 0;
function vm(overrides: Partial<VmBootRequest> = {}): { ref: VmRef; request: VmBootRequest } {
  const n = vmCount++;
  const uid = `00000000-0000-0000-0000-${String(n).padStart(12, "0")}`;
  const name = overrides.name ?? `vm-${n}`;
  return {
    ref: { uid, name, namespace: "ci" },
    request: {
      id: uid,
      name,
      vmm: "qemu",
      vcpus: 1,
      memoryMiB: 256,
      scratchBytes: 1024,
      image: { image: "registry.test/ci/base:1", extraLayers: [] },
      kernel: { kernel: "/k", args: [] },
      bootArgs: [],
      requiresSetup: false,
      workload: { argv: ["/bin/true"], env: { A: "1" } },
      ...overrides,
    },
  };
}

const ended = (l: LocalVm): boolean => l.stage === "ended";
const exits = (code: number, runMs = 10): FakeVmScript => ({ workload: () => ({ exitCode: code, runMs }) });

/** Waits (real time, bounded) until `check` holds: for what the fake VM does on its own. */
async function eventually(what: string, check: () => boolean): Promise<void> {
  const deadline = performance.now() + 20_000;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`never: ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/**
 * Runs the VM to its end, moving the fake clock whenever something sleeps on it (the workload's
 * scripted run, the wait for the guest's power-off) and letting real I/O happen in between.
 */
async function tick(w: World, uid: string): Promise<LocalVm> {
  const deadline = performance.now() + 20_000;
  for (;;) {
    const l = w.runtime.local(uid);
    if (l?.stage === "ended") return l;
    if (performance.now() > deadline) throw new Error(`VM ${uid} did not end; it is ${JSON.stringify(l)}`);
    if (w.clock.pendingSleeps > 0) await w.clock.advance(1_000);
    else await new Promise((r) => setTimeout(r, 5));
  }
}

describe("VmRuntime on the fake VMM", () => {
  const outcomes: readonly { readonly name: string; readonly script: FakeVmScript; readonly reason: string; readonly exitCode?: number; readonly succeeded: boolean }[] = [
    { name: "exit-0", script: exits(0), reason: "Completed", exitCode: 0, succeeded: true },
    { name: "exit-3", script: exits(3), reason: "ExitNonZero", exitCode: 3, succeeded: false },
    { name: "killed", script: { workload: () => ({ exitCode: 137, signal: "SIGKILL", runMs: 10 }) }, reason: "ExitNonZero", exitCode: 137, succeeded: false },
    { name: "no-such-program", script: { workload: () => ({ exitCode: 0, runMs: 0, startError: "fork/exec /nope: no such file" }) }, reason: "WorkloadStartFailed", succeeded: false },
    { name: "panic", script: { panic: "[    0.4] Kernel panic - not syncing: VFS: Unable to mount root fs" }, reason: "BootTimeout", succeeded: false },
    {
      name: "job-prints-panic",
      script: { workload: () => ({ exitCode: 0, runMs: 10, consoleLines: ["Kernel panic - not syncing: the job printed this", "imp-initramfs: FATAL: so did this"] }) },
      reason: "Completed",
      exitCode: 0,
      succeeded: true,
    },
  ];
  for (const c of outcomes) {
    it(`records ${c.reason}${c.exitCode === undefined ? "" : ` (${c.exitCode})`} for a VM that ${c.name.replaceAll("-", " ")}`, async () => {
      const w = await world({ [c.name]: c.script });
      const { ref, request } = vm({ name: c.name });
      w.runtime.start(ref, request);
      const l = await tick(w, ref.uid);
      assert.equal(l.outcome?.reason, c.reason, l.outcome?.message);
      assert.equal(l.outcome?.succeeded, c.succeeded);
      assert.equal(l.outcome?.exitCode, c.exitCode);
      await w.runtime.release(ref);
      assert.equal(w.runtime.local(ref.uid)?.stage, "released");
      assert.equal(w.runtime.local(ref.uid)?.processGone, true);
      assert.equal(existsSync(VmDir.of(w.stateDir, ref.uid).root), false, "the VM directory is gone");
    });
  }

  it("moves through Preparing, Booting and Running with a timestamp for each, and records boot time", async () => {
    const w = await world({ stages: exits(0, 1_000) });
    const { ref, request } = vm({ name: "stages" });
    w.runtime.start(ref, request);
    const running = await w.until(ref.uid, (l) => l.stage === "running");
    assert.ok(running.at.preparing !== undefined && running.at.booting !== undefined && running.at.guestReady !== undefined && running.at.running !== undefined);
    assert.equal(running.vmm, "qemu");
    const l = await tick(w, ref.uid);
    assert.equal(l.outcome?.reason, "Completed");
  });

  it("fails a boot whose guest never answers with BootTimeout", async () => {
    const w = await world({ hung: { hang: true } });
    const { ref, request } = vm({ name: "hung" });
    w.runtime.start(ref, request);
    // The hello's own bound is real time (the guest client's request timeout): bootMs of this world.
    const l = await w.until(ref.uid, ended);
    assert.equal(l.outcome?.reason, "BootTimeout", l.outcome?.message);
    await w.runtime.release(ref);
    assert.equal(w.driver.vms.get(VmDir.of(w.stateDir, ref.uid).vmm())?.process.running, false, "the VMM was stopped");
  });

  it("stops a VM during its boot: Deleted, VMM stopped, nothing left", async () => {
    const w = await world({ slow: { bootMs: 60_000 } });
    const { ref, request } = vm({ name: "slow" });
    w.runtime.start(ref, request);
    await eventually("the fake VMM runs", () => w.driver.vms.has(VmDir.of(w.stateDir, ref.uid).vmm()));
    w.runtime.stop(ref.uid, "Deleted", "deleted while booting");
    const l = await w.until(ref.uid, ended);
    assert.equal(l.outcome?.reason, "Deleted");
    await w.runtime.release(ref);
    assert.equal(w.driver.vms.get(VmDir.of(w.stateDir, ref.uid).vmm())?.process.running, false);
    assert.equal(existsSync(VmDir.of(w.stateDir, ref.uid).root), false);
  });

  it("ends a VM whose VMM dies while the workload runs with VmmExited", async () => {
    const w = await world({ crash: exits(0, 600_000) });
    const { ref, request } = vm({ name: "crash" });
    w.runtime.start(ref, request);
    await w.until(ref.uid, (l) => l.stage === "running");
    w.driver.vms.get(VmDir.of(w.stateDir, ref.uid).vmm())?.end({ code: null, signal: "SIGKILL" });
    const l = await w.until(ref.uid, ended);
    assert.equal(l.outcome?.reason, "VmmExited", l.outcome?.message);
    await w.runtime.release(ref);
  });

  /** The outcome of a VM whose VMM ends with `exit` while its workload runs. */
  async function vmmEndsWith(name: string, exit: VmExit): Promise<LocalVm["outcome"]> {
    const w = await world({ [name]: exits(0, 600_000) });
    const { ref, request } = vm({ name });
    w.runtime.start(ref, request);
    await w.until(ref.uid, (l) => l.stage === "running");
    w.driver.vms.get(VmDir.of(w.stateDir, ref.uid).vmm())?.end(exit);
    const l = await w.until(ref.uid, ended);
    await w.runtime.release(ref);
    return l.outcome;
  }

  it("ends a VM whose VMM its memory cgroup's OOM killer ended with OOMKilled, saying the limit and peak", async () => {
    const limitBytes = 640 * 1024 * 1024;
    const outcome = await vmmEndsWith("hog", { code: null, signal: "SIGKILL", memory: { oomKilled: true, peakBytes: limitBytes, limitBytes } });
    assert.equal(outcome?.reason, "OOMKilled", outcome?.message);
    assert.match(outcome?.message ?? "", /limit 640 MiB .*peak 640 MiB/);
  });

  it("keeps VmmExited for a VMM killed by a signal while its cgroup saw no OOM kill", async () => {
    const outcome = await vmmEndsWith("plain", { code: null, signal: "SIGKILL", memory: { oomKilled: false, peakBytes: 1, limitBytes: 2 } });
    assert.equal(outcome?.reason, "VmmExited", outcome?.message);
  });

  it("asks the guest again over a fresh channel when the channel is lost while the workload runs", async () => {
    const w = await world({ lossy: exits(4, 5_000) });
    const { ref, request } = vm({ name: "lossy" });
    w.runtime.start(ref, request);
    await w.until(ref.uid, (l) => l.stage === "running");
    const guest = w.driver.vms.get(VmDir.of(w.stateDir, ref.uid).vmm())?.guest;
    assert.ok(guest !== undefined);
    const before = guest.streamsOpened;
    guest.dropStreams();
    // The runtime first gives a dying VMM a moment to exit (2 s on its clock), then reconnects.
    await eventually("the runtime waits for the VMM", () => w.clock.pendingSleeps >= 2);
    await w.clock.advance(2_000);
    await eventually("the runtime opened a fresh channel", () => guest.streamsOpened > before);
    const l = await tick(w, ref.uid);
    assert.equal(l.outcome?.reason, "ExitNonZero", l.outcome?.message);
    assert.equal(l.outcome?.exitCode, 4);
    await w.runtime.release(ref);
  });

  describe("the one-time setup", () => {
    it("boots, waits in awaiting-setup, and hands the setup only to the one Exec, after recording Sent", async () => {
      let seen: Readonly<Record<string, string>> = {};
      const w = await world({ runner: { workload: (env) => ((seen = env), { exitCode: 0, runMs: 10 }) } });
      const { ref, request } = vm({ name: "runner", requiresSetup: true });
      w.runtime.start(ref, request);
      const awaiting = await w.until(ref.uid, (l) => l.stage === "awaiting-setup");
      assert.ok(awaiting.at.guestReady !== undefined, "it waits booted");
      assert.deepEqual(w.sent, [], "nothing was sent while waiting");
      assert.equal(w.runtime.deliverSetup("nope", "x"), false, "a VM that is not waiting takes no setup");
      assert.equal(w.runtime.deliverSetup(ref.uid, "jit-sentinel"), true);
      await w.until(ref.uid, (l) => l.stage === "running");
      assert.deepEqual(w.sent, [`runner:imp-run-${ref.uid}`], "Sent recorded once, before the Exec");
      assert.equal(seen.IMP_RUNNER_JITCONFIG, "jit-sentinel");
      assert.equal(seen.ACTIONS_RUNNER_INPUT_JITCONFIG, "jit-sentinel");
      assert.equal(w.runtime.local(ref.uid)?.setup, "delivered");
      assert.equal(w.runtime.deliverSetup(ref.uid, "again"), false, "a second setup is refused");
      const l = await tick(w, ref.uid);
      assert.equal(l.outcome?.reason, "Completed");
      await w.runtime.release(ref);
    });

    it("stops a VM awaiting its setup without sending anything", async () => {
      const w = await world();
      const { ref, request } = vm({ requiresSetup: true });
      w.runtime.start(ref, request);
      await w.until(ref.uid, (l) => l.stage === "awaiting-setup");
      w.runtime.stop(ref.uid, "SetupFailed", "no setup within the wait");
      const l = await w.until(ref.uid, ended);
      assert.equal(l.outcome?.reason, "SetupFailed");
      assert.deepEqual(w.sent, []);
      await w.runtime.release(ref);
    });
  });

  describe("after an agent restart", () => {
    it("re-adopts a running VM and follows its workload to its end, sending nothing again", async () => {
      const first = await world({ adoptee: exits(6, 5_000) });
      const { ref, request } = vm({ name: "adoptee" });
      first.runtime.start(ref, request);
      await first.until(ref.uid, (l) => l.stage === "running");
      // The agent restarts: a new runtime on the same node; the VM keeps running.
      const second = await world({}, first);
      assert.equal(await second.runtime.adopt(ref, "none"), true);
      const l = await tick(second, ref.uid);
      assert.equal(l.outcome?.reason, "ExitNonZero", l.outcome?.message);
      assert.equal(l.outcome?.exitCode, 6);
      const guest = second.driver.vms.get(VmDir.of(second.stateDir, ref.uid).vmm())?.guest;
      assert.equal(guest?.execs.size, 1, "exactly one exec ever started");
      await second.runtime.release(ref);
    });

    it("has nothing to adopt without a VM record", async () => {
      const w = await world();
      assert.equal(await w.runtime.adopt(vm().ref, "none"), false);
    });

    const afterTheFact: readonly { readonly name: string; readonly forge: (key: Buffer, execId: string) => readonly string[]; readonly realExit?: FakeWorkload; readonly reason: string; readonly exitCode?: number }[] = [
      { name: "its verified exit record", forge: () => [], realExit: { exitCode: 137, signal: "SIGKILL", runMs: 10 }, reason: "ExitNonZero", exitCode: 137 },
      {
        name: "the first verified record, whatever the job forged after it",
        forge: (_key, execId) => [exitRecordLine(newExitRecordKey(), { execId, exitCode: 0 }), `time=x level=INFO msg="exec exited" execId=${execId} exitCode=0`, "Kernel panic - not syncing: x"],
        realExit: { exitCode: 137, signal: "SIGKILL", runMs: 10 },
        reason: "ExitNonZero",
        exitCode: 137,
      },
      { name: "OutcomeUnknown when only forged records exist", forge: (_key, execId) => [exitRecordLine(newExitRecordKey(), { execId, exitCode: 0 }), `msg="exec exited" execId=${execId} exitCode=0`], reason: "OutcomeUnknown" },
    ];
    for (const c of afterTheFact) {
      it(`ends a VM that ended while the agent was away with ${c.name}`, async () => {
        const first = await world({ [`gone-${c.reason}-${c.exitCode ?? "x"}`]: c.realExit === undefined ? exits(0, 600_000) : { workload: () => c.realExit as FakeWorkload } });
        const { ref, request } = vm({ name: `gone-${c.reason}-${c.exitCode ?? "x"}` });
        first.runtime.start(ref, request);
        await first.until(ref.uid, (l) => l.stage === "running");
        const fake = first.driver.vms.get(VmDir.of(first.stateDir, ref.uid).vmm());
        assert.ok(fake !== undefined);
        // The agent dies here; the workload ends (or the VM just dies) while nobody watches.
        if (c.realExit !== undefined) await first.clock.advance(50);
        for (const line of c.forge(Buffer.alloc(0), `imp-run-${ref.uid}`)) await appendFile(fake.spec.dir + "/console.log", `${line}\n`);
        fake.end({ code: 0, signal: null });
        const second = await world({}, first);
        assert.equal(await second.runtime.adopt(ref, "none"), true);
        const l = await second.until(ref.uid, ended);
        assert.equal(l.outcome?.reason, c.reason, l.outcome?.message);
        assert.equal(l.outcome?.exitCode, c.exitCode);
        assert.equal(l.outcome?.succeeded, false, "never a success it cannot verify");
        await second.runtime.release(ref);
      });
    }
  });
});
