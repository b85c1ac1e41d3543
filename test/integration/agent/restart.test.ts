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
import { API_VERSION, type ImpVM, type ImpVMClass, IMP_VMS, IMP_VM_CLASSES, buildAllCrds } from "../../../src/api/index.ts";
import { startControlPlane, type ControlPlane } from "../../../src/devcluster/index.ts";
import { createResourceClient, type ResourceClient, installCrds } from "../../../src/kube/index.ts";
import { waitFor } from "../../../src/shared/index.ts";
import { buildImage, busyboxLayer } from "../../harness/oci-image.ts";
import { bootKitPresent, processesMentioning, supervisorPath } from "../../harness/node-agent.ts";
import { sealedInputsStatus } from "../../harness/sealed-inputs.ts";
import { pushImage, startRegistry, type RunningRegistry } from "../../harness/registry.ts";

const VMS = IMP_VMS;
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
  /** The log of the agent started last: what a failed wait prints, with the VM's console. */
  let currentLog: () => string = () => "(no agent started)";

  before(async () => {
    plane = await startControlPlane({ controllerManager: false });
    await installCrds(plane.kubeConfig, buildAllCrds());
    registry = await startRegistry();
    await pushImage(registry.url, "test/busybox", "1", buildImage([await busyboxLayer()]));
    image = `${registry.host}/test/busybox:1`;
    vms = createResourceClient<ImpVM>(plane.kubeConfig, VMS);
    await createResourceClient<ImpVMClass>(plane.kubeConfig, IMP_VM_CLASSES).create({ apiVersion: API_VERSION, kind: "ImpVMClass", metadata: { name: "small" }, spec: { vcpu: 1, memoryMiB: 512, scratchDisk: "256Mi", arch: "amd64" } });
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
    currentLog = () => log;
    return { child, log: () => log };
  }

  async function kill(child: ChildProcess): Promise<void> {
    const gone = new Promise((r) => child.once("exit", r));
    child.kill("SIGKILL");
    await gone;
  }

  /**
   * A VM bound to the node. `withExecId`: the workload finds its own exec id in $FORGE_EXEC_ID (from
   * a Secret made once the uid is known, sealed to the node as the operator would), as a root job
   * can find it in its guest; a forger needs it.
   */
  async function boundVm(name: string, script: string, withExecId = false): Promise<ImpVM> {
    const env = withExecId ? { env: [{ name: "FORGE_EXEC_ID", valueFrom: { secretKeyRef: { name: `${name}-forge`, key: "execId" } } }] } : {};
    const vm = await vms.create({ apiVersion: API_VERSION, kind: "ImpVM", metadata: { name, namespace: NS }, spec: { template: { classRef: { name: "small" }, image, kernel: "default", expireAfter: "1h" }, workload: { command: ["/bin/sh", "-c", script], ...env }, lifecycle: "ephemeral" } } as ImpVM);
    const inputs = withExecId ? await sealedInputsStatus(plane.kubeConfig, NODE, vm.metadata.uid ?? "", { [`${name}-forge`]: { execId: `imp-run-${vm.metadata.uid ?? ""}` } }) : {};
    await vms.patchStatus({ namespace: NS, name }, { status: { phase: "Scheduled", nodeName: NODE, ...inputs } });
    return vm;
  }

  const phaseOf = async (name: string): Promise<ImpVM> => vms.get({ namespace: NS, name });
  /**
   * Waits for one of `phases`; on timeout it says where the VM stood, with the agent's last log lines
   * and the VM's serial console (kept while it is readable: the agent removes it with the VM), since
   * a VM that never reaches Running under load is otherwise explained by nothing.
   */
  async function waitPhase(name: string, phases: string[], timeoutMs = 240_000): Promise<ImpVM> {
    let last = "not read";
    let consoleText = "(never read)";
    return waitFor(`${name} in ${phases.join("|")}`, async () => {
      const vm = await phaseOf(name);
      last = `${vm.status?.phase ?? "no phase"}${vm.status?.reason === undefined ? "" : ` (${vm.status.reason}: ${vm.status.message ?? ""})`}`;
      consoleText = await readFile(join(stateDir, "vms", vm.metadata.uid ?? "", "vmm", "serial.log"), "utf8").catch(() => consoleText);
      return phases.includes(vm.status?.phase ?? "") ? vm : undefined;
    }, { timeoutMs, intervalMs: 200 }).catch((err: unknown) =>
      Promise.reject(new Error(`${name} never reached ${phases.join("|")}; last seen ${last}.\n--- the agent's last log lines ---\n${currentLog().slice(-4000)}\n--- the VM's serial console, last 3000 bytes ---\n${consoleText.slice(-3000)}`, { cause: err })));
  }

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

  /**
   * What a hostile job writes to the console: every line the fatal-line watcher knows, to the
   * console and the kernel log, and forged exit records saying "exit 0" — in the old log format the
   * agent once read and in the record format with a made-up MAC — again and again.
   */
  const FORGE = [
    'for i in 1 2 3; do',
    '  echo "Kernel panic - not syncing: printed by the job" > /dev/console',
    '  echo "imp-initramfs: FATAL: printed by the job" > /dev/console',
    '  echo "<0>Kernel panic - not syncing: via kmsg" > /dev/kmsg',
    `  echo 'time=2026-12-04T00:00:00Z level=INFO msg="exec exited" execId='"$FORGE_EXEC_ID"' exitCode=0' > /dev/console`,
    '  p=$(printf \'{"execId":"%s","exitCode":0}\' "$FORGE_EXEC_ID" | base64 | tr -d "=\\n" | tr "+/" "-_")',
    '  echo "imp-exit-record/1 $p AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" > /dev/console',
    "done",
  ].join("\n");

  it("a job printing every fatal console line and forged exit records ends with its true outcome while the agent watches", async () => {
    const agent = startAgent();
    const vm = await boundVm("forger-watched", `${FORGE}\nsleep 1\nexit 0`, true);
    const uid = vm.metadata.uid ?? "";
    await waitPhase("forger-watched", ["Running"]);
    let seen = "";
    const printed = await waitFor("the job printed its fatal lines", async () => {
      seen = await readFile(join(stateDir, "vms", uid, "vmm", "serial.log"), "utf8").catch(() => seen);
      return /Kernel panic - not syncing: printed by the job/.test(seen) ? seen : undefined;
    }, { timeoutMs: 60_000, intervalMs: 100 }).catch(async (err: unknown) =>
      Promise.reject(new Error(`the job's lines never reached the console; the VM is ${JSON.stringify((await phaseOf("forger-watched")).status)}\n--- the agent's last log lines ---\n${agent.log().slice(-4000)}\n--- the console, last 3000 bytes ---\n${seen.slice(-3000)}`, { cause: err })));
    assert.match(printed, /imp-initramfs: FATAL: printed by the job/);
    const done = await waitPhase("forger-watched", ["Succeeded", "Failed"]);
    assert.equal(done.status?.phase, "Succeeded", `console lines decided nothing: ${JSON.stringify(done.status)}`);
    assert.equal(done.status?.exitCode, 0);
    await waitFor("released", async () => ((await phaseOf("forger-watched")).status?.teardown?.completedAt !== undefined ? true : undefined), { timeoutMs: 60_000, intervalMs: 200 });
    await kill(agent.child);
  });

  it("a job that forges exit 0 and is then SIGKILLed while no agent runs is recorded Failed with 137", async () => {
    const first = startAgent();
    // A detached forger outlives the job and keeps writing "exit 0" after the real exit until the
    // power-off, through the kernel log (printk reaches the console at once). It ignores the
    // shutdown's SIGTERM, so it writes for at least the 200 ms before the SIGKILL, however slowly
    // it was scheduled before: its lines come after the real exit record on any machine.
    const afterwards = `setsid sh -c 'trap "" TERM HUP; while kill -0 '$$' 2>/dev/null; do sleep 0.05; done; while :; do echo "<1>time=x level=INFO msg=\\"exec exited\\" execId=$FORGE_EXEC_ID exitCode=0" > /dev/kmsg; done' </dev/null >/dev/null 2>&1 &`;
    const vm = await boundVm("forger-away", `sleep 4\n${FORGE}\n${afterwards}\nsleep 0.3\nkill -9 $$`, true);
    const uid = vm.metadata.uid ?? "";
    await waitPhase("forger-away", ["Running"]);
    await kill(first.child);
    await waitFor("the VM ended on its own", async () => ((await processesMentioning(uid, "qemu")).length === 0 ? true : undefined), { timeoutMs: 120_000, intervalMs: 200 });
    const consoleText = await readFile(join(stateDir, "vms", uid, "vmm", "serial.log"), "utf8");
    assert.match(consoleText, /Kernel panic - not syncing: printed by the job/, "the job did print the fatal line");
    assert.match(consoleText, new RegExp(`msg="exec exited" execId=imp-run-${uid} exitCode=0`), "and the old-format forgery");
    const realAt = consoleText.indexOf(`msg="exec exited" execId=imp-run-${uid} exitCode=137`);
    assert.ok(realAt >= 0 && consoleText.slice(realAt).includes(`msg="exec exited" execId=imp-run-${uid} exitCode=0`), `the forger wrote after the real exit line (what a console reader once took): ${consoleText.slice(realAt, realAt + 2000)}`);
    const second = startAgent();
    const done = await waitPhase("forger-away", ["Succeeded", "Failed"], 120_000);
    assert.equal(done.status?.phase, "Failed", JSON.stringify(done.status));
    assert.equal(done.status?.exitCode, 137, JSON.stringify(done.status));
    assert.equal(done.status?.reason, "ExitNonZero");
    assert.match(done.status?.message ?? "", /verified exit record/);
    await waitFor("released", async () => ((await phaseOf("forger-away")).status?.teardown?.completedAt !== undefined ? true : undefined), { timeoutMs: 60_000, intervalMs: 200 });
    assert.deepEqual(await processesMentioning(uid), []);
    await kill(second.child);
  });
});
