/**
 * The per-VM supervisor with real processes and real cgroups: `sleep` plays the VMM. Each test checks
 * that nothing is left afterwards (no process, no cgroup, no socket). Latencies are printed as test
 * diagnostics, never asserted beyond generous bounds.
 */
import { after, afterEach, before, describe, it, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import {
  adoptSupervised, listSupervised, SupervisorLauncher, sweepSupervised, SUPERVISOR_FILES,
  type ProcessRef, type SupervisorIdentity,
} from "../../../src/agent/supervisor/index.ts";
import { liveness } from "../../../src/agent/supervisor/proc.ts";
import { memoryMount } from "../../../src/agent/supervisor/cgroups.ts";
import { ImpError, waitFor } from "../../../src/shared/index.ts";
import { createInEveryHierarchy } from "../../harness/cgroups.ts";

const root = join(import.meta.dirname, "..", "..", "..");
const supervisorBinary = process.env.IMP_SUPERVISOR_BIN ?? join(process.env.IMP_CACHE ?? join(root, ".cache"), "supervisor", "imp-supervisor");
const haveBinary = existsSync(supervisorBinary);
const noBinary = haveBinary ? undefined : `no supervisor binary at ${supervisorBinary} (run scripts/setup.d/35-supervisor.sh)`;
const node = process.execPath;
const cgroupParent = `imp-test-${process.pid}`;
let mount: string | undefined;
let noCgroup: string | undefined;

// Short: Unix socket paths must stay under 108 bytes.
const base = mkdtempSync("/tmp/imp-sv-");
let n = 0;
const seen: ProcessRef[] = [];

before(async () => {
  mount = await memoryMount("/sys/fs/cgroup");
  if (process.getuid?.() !== 0) noCgroup = "needs root to create cgroups";
  else if (mount === undefined) noCgroup = "no memory cgroup controller under /sys/fs/cgroup";
});

after(() => {
  rmSync(base, { recursive: true, force: true });
  if (mount !== undefined && existsSync(join(mount, cgroupParent))) rmdirSync(join(mount, cgroupParent));
});

function newVm(): { vmId: string; vmDir: string } {
  const vmId = `vm-${++n}`;
  const vmDir = join(base, vmId);
  mkdirSync(vmDir, { recursive: true });
  return { vmId, vmDir };
}

function launcherFor(vm: { vmId: string; vmDir: string }, withCgroup = true): SupervisorLauncher {
  return new SupervisorLauncher({
    supervisorBinary, vmId: vm.vmId, vmDir: vm.vmDir,
    ...(withCgroup && noCgroup === undefined ? { cgroup: { parent: cgroupParent } } : {}),
    memoryLimitBytes: () => 256 * 1024 * 1024,
  });
}

const sleepRequest = (vmDir: string) => ({ name: "vmm", binary: "sleep", args: ["1000"], stdoutPath: join(vmDir, "vmm.out"), stderrPath: join(vmDir, "vmm.err") });

function remember(identity: SupervisorIdentity): void {
  seen.push(identity.supervisor, identity.process);
}

/** Supervisors whose command line mentions our base directory (all of this file's). */
function supervisorsRunning(): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^[0-9]+$/.test(entry)) continue;
    try {
      if (/\) Z /.test(readFileSync(`/proc/${entry}/stat`, "utf8"))) continue;
      if (readFileSync(`/proc/${entry}/cmdline`, "utf8").includes(base)) pids.push(Number(entry));
    } catch {
      // ended while we looked
    }
  }
  return pids;
}

function socketsUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true }).filter((e) => e.isSocket()).map((e) => join(e.parentPath, e.name));
}

function cgroupsLeft(): string[] {
  if (mount === undefined) return [];
  const parent = join(mount, cgroupParent);
  if (!existsSync(parent)) return [];
  return readdirSync(parent, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name);
}

afterEach(async () => {
  // Nothing may outlive a test: not a process (checked by pid and start time), a cgroup or a socket.
  for (const ref of seen.splice(0)) {
    await waitFor(`pid ${ref.pid} gone`, async () => ((await liveness(ref)) === "alive" ? undefined : true), { timeoutMs: 10_000, intervalMs: 25 });
  }
  assert.deepEqual(supervisorsRunning(), []);
  assert.deepEqual(cgroupsLeft(), []);
  assert.deepEqual(socketsUnder(base), []);
});

/** Starts a stand-in agent in its own Node process; resolves with what it launched. */
async function launchFromChildAgent(vm: { vmId: string; vmDir: string }, inCgroups: readonly string[] = []): Promise<{ kill: () => Promise<void>; dir: string; identity: SupervisorIdentity }> {
  const agentArgs = [join(import.meta.dirname, "agent-child.ts"), supervisorBinary, vm.vmDir, vm.vmId, noCgroup === undefined ? cgroupParent : "-", "sleep", "1000"];
  // Joining the cgroups first, as a container runtime puts a container's first process in them.
  const child = inCgroups.length === 0
    ? spawn(node, agentArgs, { stdio: ["ignore", "pipe", "inherit"] })
    : spawn("sh", ["-c", 'for f in $IMP_JOIN; do echo $$ > "$f" || exit 1; done; exec "$@"', "sh", node, ...agentArgs], { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, IMP_JOIN: inCgroups.join(" ") } });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const lines = createInterface({ input: child.stdout });
  const line = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("the child agent printed nothing within 60 s")), 60_000);
    lines.once("line", (l) => { clearTimeout(timer); resolve(l); });
    child.once("exit", (code) => { clearTimeout(timer); reject(new Error(`the child agent exited with ${code}`)); });
  });
  const out = JSON.parse(line) as { dir: string; identity: SupervisorIdentity };
  remember(out.identity);
  return {
    ...out,
    kill: async () => {
      child.kill("SIGKILL");
      await exited;
    },
  };
}

const ms = (start: bigint): string => `${(Number(process.hrtime.bigint() - start) / 1e6).toFixed(1)} ms`;

describe("supervisor", { skip: noBinary }, () => {
  it("launches a process in its own memory cgroup, reports it running, and stops it leaving nothing", async (t: TestContext) => {
    if (noCgroup !== undefined) {
      t.skip(noCgroup);
      return;
    }
    const vm = newVm();
    const started = process.hrtime.bigint();
    const proc = await launcherFor(vm).launch(sleepRequest(vm.vmDir));
    t.diagnostic(`launch latency (launch() to running under the supervisor): ${ms(started)}`);
    remember(proc.identity);
    assert.equal(proc.running, true);
    assert.equal(await liveness(proc.identity.process), "alive");
    const cgroup = proc.identity.cgroup;
    assert.ok(cgroup !== undefined && mount !== undefined && cgroup === join(mount, cgroupParent, vm.vmId, "vmm"), `cgroup ${cgroup}`);
    const procs = readFileSync(join(cgroup, "cgroup.procs"), "utf8").split(/\s+/).filter(Boolean).map(Number);
    assert.deepEqual(procs, [proc.pid]);
    const limitFile = proc.identity.cgroupMode === "v2" ? "memory.max" : "memory.limit_in_bytes";
    assert.equal(Number(readFileSync(join(cgroup, limitFile), "utf8")), 256 * 1024 * 1024);
    // The VMM's own /proc view agrees: it is charged to its cgroup, not to ours.
    assert.match(readFileSync(`/proc/${proc.pid}/cgroup`, "utf8"), new RegExp(`memory:/${cgroupParent}/${vm.vmId}/vmm$|^0::/${cgroupParent}/${vm.vmId}/vmm$`, "m"));

    const exit = await proc.stop(5_000);
    assert.deepEqual({ code: exit.code, signal: exit.signal, recorded: exit.recorded }, { code: null, signal: "SIGTERM", recorded: true });
    assert.equal(proc.running, false);
    const record = JSON.parse(readFileSync(join(proc.dir, SUPERVISOR_FILES.exit), "utf8")) as { signal: string; process: ProcessRef };
    assert.equal(record.signal, "SIGTERM");
    assert.deepEqual(record.process, proc.identity.process);
    await waitFor("cgroup removed", () => (existsSync(cgroup) ? undefined : true), { timeoutMs: 10_000 });
    assert.equal(existsSync(join(mount, cgroupParent, vm.vmId)), false, "the VM's cgroup group directory is removed with its last leaf");
    await proc.remove();
  });

  it("records that its memory cgroup's OOM killer ended a process that outgrew its limit, with the limit and the peak", async (t: TestContext) => {
    if (noCgroup !== undefined) {
      t.skip(noCgroup);
      return;
    }
    const vm = newVm();
    // Touches 16 MiB more each round until the 256 MiB limit stops it.
    const hog = "const held = []; for (;;) held.push(Buffer.alloc(16 << 20, 1));";
    const proc = await launcherFor(vm).launch({ name: "vmm", binary: node, args: ["-e", hog], stdoutPath: join(vm.vmDir, "out.log"), stderrPath: join(vm.vmDir, "out.log") });
    remember(proc.identity);
    const exit = await waitFor("the memory hog's end", async () => (proc.running ? undefined : proc.exited()), { timeoutMs: 60_000, intervalMs: 50 });
    t.diagnostic(`exit: ${JSON.stringify(exit)}`);
    assert.equal(exit.signal, "SIGKILL");
    assert.equal(exit.memory?.oomKilled, true, "the cgroup's OOM kill count says it");
    assert.equal(exit.memory?.limitBytes, 256 * 1024 * 1024);
    const record = JSON.parse(readFileSync(join(proc.dir, SUPERVISOR_FILES.exit), "utf8")) as { memory?: { oomKilled: boolean } };
    assert.equal(record.memory?.oomKilled, true, "exit.json carries it for an agent that was away");
    await proc.remove();
  });

  it("records no OOM kill for a process stopped by its owner", async (t: TestContext) => {
    if (noCgroup !== undefined) {
      t.skip(noCgroup);
      return;
    }
    const vm = newVm();
    const proc = await launcherFor(vm).launch(sleepRequest(vm.vmDir));
    remember(proc.identity);
    const exit = await proc.stop(5_000);
    assert.equal(exit.memory?.oomKilled, false);
    assert.ok((exit.memory?.peakBytes ?? 0) > 0 || proc.identity.cgroupMode === "v2", "v1 always knows the peak; v2 before Linux 5.19 may not");
    await proc.remove();
  });

  it("learns of a SIGKILLed process at once through the socket's exit event", async (t: TestContext) => {
    const vm = newVm();
    const proc = await launcherFor(vm).launch(sleepRequest(vm.vmDir));
    remember(proc.identity);
    const killed = process.hrtime.bigint();
    process.kill(proc.pid, "SIGKILL");
    let timer: NodeJS.Timeout | undefined;
    const exit = await Promise.race([
      proc.exited(),
      new Promise<never>((_, reject) => { timer = setTimeout(() => reject(new Error("no exit within 10 s")), 10_000); }),
    ]).finally(() => clearTimeout(timer));
    t.diagnostic(`exit-detection latency (SIGKILL to exited() resolving): ${ms(killed)}`);
    assert.equal(exit.signal, "SIGKILL");
    assert.equal(exit.code, null);
    assert.equal(exit.recorded, true);
    assert.ok(existsSync(join(proc.dir, SUPERVISOR_FILES.exit)));
    await proc.remove();
  });

  it("keeps the process running when the agent is SIGKILLed; a new agent adopts and stops it", async (t: TestContext) => {
    const vm = newVm();
    const agent = await launchFromChildAgent(vm);
    await agent.kill();
    // A death the agent's would cause (a parent-death signal, a broken socket) sends no event to
    // wait for: give it the time such a death takes, then check both are alive.
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(await liveness(agent.identity.process), "alive", "the VMM outlived the agent");
    assert.equal(await liveness(agent.identity.supervisor), "alive", "the supervisor outlived the agent");

    const started = process.hrtime.bigint();
    const proc = await adoptSupervised(agent.dir);
    t.diagnostic(`adopt latency (adopt() of a running process): ${ms(started)}`);
    assert.equal(proc.running, true);
    assert.equal(proc.pid, agent.identity.process.pid);
    const exit = await proc.stop(5_000);
    assert.equal(exit.signal, "SIGTERM");
    assert.equal(exit.recorded, true);
    await proc.remove();
  });

  it("keeps the VM running when the agent's container is stopped the way runc stops a hostPID container", async (t: TestContext) => {
    if (noCgroup !== undefined) return t.skip(noCgroup);
    // A stand-in container: one cgroup in every hierarchy, as runc makes for a Pod's container.
    const container = `imp-ctr-${process.pid}`;
    const dirs = await createInEveryHierarchy(container);
    try {
      const vm = newVm();
      const agent = await launchFromChildAgent(vm, dirs.map((d) => join(d, "cgroup.procs")));
      // runc's kill --all (and its delete of a container sharing the host's PID namespace) signals
      // every process in the container's cgroup, until the cgroup is empty.
      const killed: number[] = [];
      await waitFor("the container's cgroups empty", async () => {
        let left = 0;
        for (const dir of dirs) {
          for (const pid of readFileSync(join(dir, "cgroup.procs"), "utf8").split("\n").filter((l) => l !== "").map(Number)) {
            left++;
            killed.push(pid);
            try { process.kill(pid, "SIGKILL"); } catch { /* gone meanwhile */ }
          }
        }
        return left === 0 ? true : undefined;
      }, { timeoutMs: 10_000, intervalMs: 25 });
      await agent.kill();
      assert.ok(killed.length > 0, "the stand-in agent was in the container's cgroups");
      assert.ok(!killed.includes(agent.identity.supervisor.pid) && !killed.includes(agent.identity.process.pid), "neither the supervisor nor its process was left in the container's cgroups");
      assert.equal(await liveness(agent.identity.process), "alive", "the VMM outlived the container");
      assert.equal(await liveness(agent.identity.supervisor), "alive", "the supervisor outlived the container");
      const proc = await adoptSupervised(agent.dir);
      assert.equal(proc.running, true);
      const exit = await proc.stop(5_000);
      assert.equal(exit.recorded, true);
      await proc.remove();
    } finally {
      for (const dir of dirs) await waitFor(`${dir} removed`, async () => { try { rmdirSync(dir); return true; } catch (err) { return (err as NodeJS.ErrnoException).code === "ENOENT" ? true : undefined; } }, { timeoutMs: 10_000, intervalMs: 50 });
    }
  });

  it("reads back an exit that happened while no agent was connected", async () => {
    const vm = newVm();
    const agent = await launchFromChildAgent(vm);
    await agent.kill();
    process.kill(agent.identity.process.pid, "SIGKILL");
    await waitFor("supervisor gone", async () => ((await liveness(agent.identity.supervisor)) === "alive" ? undefined : true), { timeoutMs: 10_000, intervalMs: 25 });
    const proc = await adoptSupervised(agent.dir);
    assert.equal(proc.running, false);
    const exit = await proc.exited();
    assert.deepEqual({ code: exit.code, signal: exit.signal, recorded: exit.recorded }, { code: null, signal: "SIGKILL", recorded: true });
    assert.ok(exit.at !== undefined && !Number.isNaN(Date.parse(exit.at)));
    // Launching again into a directory whose exit was never collected is refused.
    await assert.rejects(launcherFor(vm).launch(sleepRequest(vm.vmDir)), (err: unknown) => err instanceof ImpError && err.code === "SupervisorExitUncollected");
    await proc.remove();
  });

  it("reports an unrecorded exit when the supervisor itself is SIGKILLed: its process dies with it", async () => {
    const vm = newVm();
    const proc = await launcherFor(vm).launch(sleepRequest(vm.vmDir));
    remember(proc.identity);
    process.kill(proc.identity.supervisor.pid, "SIGKILL");
    const exit = await proc.exited();
    assert.deepEqual({ code: exit.code, signal: exit.signal, recorded: exit.recorded }, { code: null, signal: "SIGKILL", recorded: false });
    assert.equal(await liveness(proc.identity.process), "gone", "PDEATHSIG took the process down with its supervisor");
    assert.equal(existsSync(join(proc.dir, SUPERVISOR_FILES.exit)), false);
    await assert.rejects(adoptSupervised(proc.dir), (err: unknown) => err instanceof ImpError && err.code === "SupervisorLost");
    // The supervisor left its socket file behind; the agent removes the directory with the rest.
    await proc.remove();
  });

  it("refuses to adopt a stale identity: pid reused, supervisor gone, other boot", async () => {
    const vm = newVm();
    const proc = await launcherFor(vm, false).launch(sleepRequest(vm.vmDir));
    remember(proc.identity);
    const identityPath = join(proc.dir, SUPERVISOR_FILES.identity);
    const real = readFileSync(identityPath, "utf8");
    const write = (patch: Partial<SupervisorIdentity>): void => writeFileSync(identityPath, JSON.stringify({ ...proc.identity, ...patch }));
    try {
      // A live pid (this test process) whose start time is not the recorded one: a reused pid.
      const self = { pid: process.pid, startTime: 1 };
      write({ supervisor: self });
      await assert.rejects(adoptSupervised(proc.dir), (err: unknown) => {
        assert.ok(err instanceof ImpError);
        assert.equal(err.code, "SupervisorIdentityMismatch");
        assert.match(err.message, /^Cannot adopt supervised process vmm in .*: pid \d+ now belongs to another process/);
        return true;
      });
      // The right supervisor pid and start time but a different process: the greeting does not match.
      write({ process: { pid: proc.pid, startTime: proc.identity.process.startTime + 1 } });
      await assert.rejects(adoptSupervised(proc.dir), (err: unknown) => err instanceof ImpError && err.code === "SupervisorIdentityMismatch" && /not the recorded ones/.test(err.message));
      write({ bootId: "00000000-0000-0000-0000-000000000000" });
      await assert.rejects(adoptSupervised(proc.dir), (err: unknown) => err instanceof ImpError && err.code === "SupervisorIdentityMismatch" && /from boot/.test(err.message));
      const reaped = spawn("true");
      const deadPid = await new Promise<number>((resolve) => reaped.once("exit", () => resolve(reaped.pid ?? 0)));
      write({ supervisor: { pid: deadPid, startTime: 1 } });
      await assert.rejects(adoptSupervised(proc.dir), (err: unknown) => err instanceof ImpError && ["SupervisorLost", "SupervisorIdentityMismatch"].includes(err.code));
    } finally {
      writeFileSync(identityPath, real);
    }
    const adopted = await adoptSupervised(proc.dir);
    await adopted.stop(5_000);
    await proc.exited();
    await proc.remove();
  });

  it("reports the exit code of a process that exits at once, however the connect races it", async () => {
    const vm = newVm();
    const proc = await launcherFor(vm).launch({ ...sleepRequest(vm.vmDir), binary: "sh", args: ["-c", "echo out; echo err >&2; exit 3"] });
    remember(proc.identity);
    const exit = await proc.exited();
    assert.deepEqual({ code: exit.code, signal: exit.signal, recorded: exit.recorded }, { code: 3, signal: null, recorded: true });
    assert.equal(readFileSync(join(vm.vmDir, "vmm.out"), "utf8"), "out\n");
    assert.equal(readFileSync(join(vm.vmDir, "vmm.err"), "utf8"), "err\n");
    proc.signal("SIGKILL"); // a no-op once exited
    assert.equal((await proc.stop(1_000)).code, 3);
    await proc.remove();
  });

  it("fails to launch a program that does not exist, leaving nothing", async () => {
    const vm = newVm();
    await assert.rejects(
      launcherFor(vm).launch({ ...sleepRequest(vm.vmDir), binary: "/nonexistent/vmm" }),
      (err: unknown) => err instanceof ImpError && err.code === "SupervisorStartFailed" && err.message.includes("/nonexistent/vmm"),
    );
    await waitFor("supervisor gone", () => (supervisorsRunning().length === 0 ? true : undefined), { timeoutMs: 10_000 });
  });

  it("sweeps the processes, cgroups and directories of VMs that are not live, and leaves the live one", async () => {
    const stateDir = join(base, `state-${++n}`);
    mkdirSync(stateDir);
    const make = (vmId: string) => {
      const vmDir = join(stateDir, vmId);
      mkdirSync(vmDir);
      return { vmId, vmDir };
    };
    const live = make("live");
    const orphan = make("orphan");
    const exited = make("exited");
    const liveProc = await launcherFor(live).launch(sleepRequest(live.vmDir));
    const orphanProc = await launcherFor(orphan).launch(sleepRequest(orphan.vmDir));
    const exitedProc = await launcherFor(exited).launch(sleepRequest(exited.vmDir));
    for (const p of [liveProc, orphanProc, exitedProc]) remember(p.identity);
    process.kill(exitedProc.pid, "SIGKILL");
    await exitedProc.exited();
    orphanProc.detach(); // as if the agent that launched it had gone

    const before = await listSupervised(stateDir, noCgroup === undefined ? { parent: cgroupParent } : undefined);
    assert.deepEqual(before.entries.map((e) => [e.vmId, e.process]), [["exited", "gone"], ["live", "alive"], ["orphan", "alive"]]);
    if (noCgroup === undefined) assert.deepEqual(before.cgroups.map((c) => c.vmId), ["live", "orphan"]);

    const counts = await sweepSupervised(stateDir, new Set(["live"]), noCgroup === undefined ? { cgroup: { parent: cgroupParent } } : {});
    assert.deepEqual(counts.errors, []);
    assert.equal(counts.processesKilled, 1);
    assert.equal(counts.dirsRemoved, 2);
    assert.equal(await liveness(orphanProc.identity.process), "gone");
    assert.equal(await liveness(orphanProc.identity.supervisor), "gone");
    assert.equal(existsSync(orphanProc.dir), false);
    assert.equal(existsSync(exitedProc.dir), false);
    if (noCgroup === undefined) assert.deepEqual(cgroupsLeft(), ["live"]);

    assert.equal(liveProc.running, true);
    assert.equal(await liveness(liveProc.identity.process), "alive");
    const after = await listSupervised(stateDir, noCgroup === undefined ? { parent: cgroupParent } : undefined);
    assert.deepEqual(after.entries.map((e) => e.vmId), ["live"]);
    await liveProc.stop(5_000);
    await liveProc.remove();
  });
});
