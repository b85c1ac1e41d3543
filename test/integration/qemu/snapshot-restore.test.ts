/**
 * Memory snapshots on real QEMU with the real guest agent: one template VM booted to "guest agent
 * ready, nothing sent", saved (its RAM in a file, its device state over QMP), and two job VMs
 * restored from it, each with its own copy-on-write RAM and scratch disk. The proof that clones are
 * strangers (docs/snapshots.md): after the host's configure each has its own random bytes, boot id,
 * hostname and MAC; what one writes to memory or disk the other and the template never see; and
 * nothing sent after restore — the exit-record key, a setup-like token — is in any snapshot file.
 */
import { after, afterEach, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { open, mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { readHostTscKhz, type GuestClient } from "../../../src/agent/index.ts";
import { QemuVm, type QemuVmOptions } from "../../../src/agent/vmm/index.ts";
import { connectGuest } from "../../../src/agent/vm/index.ts";
import { failureTracker, loadBootKit, makeScratchDisk, runExec, sha256File } from "../../harness/vm.ts";
import { processesMentioning } from "../../harness/node-agent.ts";

const run = promisify(execFile);
const DAY_MS = 86_400_000;

interface Clone {
  readonly name: string;
  readonly vm: QemuVm;
  readonly client: GuestClient;
  /** From spawning QEMU to the guest agent's hello. */
  readonly restoreMs: number;
  readonly mac: string;
  readonly hostname: string;
}

/** Whether `needle` occurs anywhere in the file, read in chunks that overlap by the needle's length. */
async function fileContains(path: string, needle: Buffer): Promise<boolean> {
  const file = await open(path, "r");
  try {
    const chunk = Buffer.alloc(8 << 20);
    let position = 0;
    for (;;) {
      const { bytesRead } = await file.read(chunk, 0, chunk.length, position);
      if (bytesRead === 0) return false;
      if (chunk.subarray(0, bytesRead).includes(needle)) return true;
      if (bytesRead < chunk.length) return false;
      position += bytesRead - needle.length;
    }
  } finally {
    await file.close();
  }
}

describe("VMs restored from one QEMU memory snapshot", { timeout: 300_000 }, (suite) => {
  let dir: string;
  let machine: QemuVmOptions["machine"];
  let memoryFile: string;
  let statePath: string;
  let templateScratch: string;
  let templateMemoryDigest: string;
  let templateScratchDigest: string;
  const clones: Clone[] = [];
  const failures = failureTracker();
  const token = `imp-setup-${randomBytes(16).toString("hex")}`;
  const exitKey = randomBytes(32);

  const machineWith = (scratch: string): QemuVmOptions["machine"] => ({ ...machine, drives: [machine.drives[0]!, { id: "scratch", path: scratch }] });

  async function restore(name: string, mac: string, unixTimeMs = Date.now()): Promise<Clone> {
    const scratch = join(dir, `${name}-scratch.ext4`);
    // The clone's own disk: a copy of the template's as it was saved (the guest's page cache in the
    // memory file describes exactly that disk).
    await run("cp", ["--sparse=always", "--reflink=auto", templateScratch, scratch]);
    const started = performance.now();
    const vm = await QemuVm.start({ dir: join(dir, name), channel: "serial", dieWithParent: true, machine: machineWith(scratch), snapshot: { role: "restore", memoryFile, statePath } });
    const client = await connectGuest(vm, { timeoutMs: 30_000, serial: true, clientName: "imp-e2e" });
    await client.hello();
    const restoreMs = performance.now() - started;
    const hostname = `job-${name}`;
    await client.configure({ hostname, unixTimeMs, entropySeed: randomBytes(64), exitRecordKey: exitKey, network: { interface: "eth0", address: "10.0.2.15/24", gateway: "10.0.2.2", mac } });
    const clone = { name, vm, client, restoreMs, mac, hostname };
    clones.push(clone);
    return clone;
  }

  const sh = async (clone: Clone, execId: string, script: string, env: Record<string, string> = {}): Promise<string> => {
    const result = await runExec(clone.client, { execId, argv: ["/bin/sh", "-c", script], env: { PATH: "/bin:/sbin:/usr/bin", ...env } });
    assert.equal(result.exitCode, 0, `${clone.name}: ${script}: ${result.stderr}`);
    return result.stdout;
  };

  before(async () => {
    const kit = await loadBootKit();
    dir = await mkdtemp(join(tmpdir(), "imp-snap-"));
    memoryFile = join(dir, "template.mem");
    statePath = join(dir, "template.state");
    templateScratch = join(dir, "template-scratch.ext4");
    await makeScratchDisk(templateScratch, 256);
    const tscKhz = await readHostTscKhz();
    machine = {
      kernel: kit.kernel,
      initrd: kit.initrd,
      cmdline: ["console=ttyS0", "quiet", "panic=-1", "ro", "root=/dev/vda", `init=${kit.guestInit}`, "imp.scratch=/dev/vdb"],
      memoryMiB: 512,
      vcpus: 1,
      accel: "tcg",
      ...(tscKhz === undefined ? {} : { tscKhz }),
      // The base is shared read-only by the template and every clone, as a node shares an image.
      drives: [{ id: "root", path: kit.rootfs, readOnly: true }, { id: "scratch", path: templateScratch }],
      userNetwork: true,
    };
    const started = performance.now();
    const template = await QemuVm.start({ dir: join(dir, "template"), channel: "serial", dieWithParent: true, machine, snapshot: { role: "template", memoryFile } });
    try {
      const client = await connectGuest(template, { timeoutMs: 90_000, serial: true, clientName: "imp-e2e" });
      await client.hello();
      const bootMs = performance.now() - started;
      client.close();
      const saved = await template.saveSnapshot(statePath, { timeoutMs: 60_000 });
      suite.diagnostic(`template: spawn to hello ${Math.round(bootMs)} ms; saved in ${Math.round(saved.ms)} ms, device state ${saved.stateBytes} bytes, RAM file ${(await stat(memoryFile)).size >> 20} MiB`);
    } finally {
      await template.stop();
    }
    templateMemoryDigest = await sha256File(memoryFile);
    templateScratchDigest = await sha256File(templateScratch);
    await restore("c1", "02:00:0a:00:00:11");
    // c2's clock is set a day ahead: what the guest reads can only come from this configure.
    await restore("c2", "02:00:0a:00:00:12", Date.now() + DAY_MS);
    suite.diagnostic(`restore (spawn to hello): ${clones.map((c) => `${c.name} ${Math.round(c.restoreMs)} ms`).join(", ")}`);
  });
  afterEach(failures.record);
  after(async () => {
    for (const clone of clones) {
      clone.client.close();
      await clone.vm.stop();
    }
    if (dir !== undefined && !failures.any) await rm(dir, { recursive: true, force: true });
    else if (dir !== undefined) suite.diagnostic(`kept ${dir} for inspection`);
  });

  it("runs each clone on from where the template was saved, answering as its own VM", async () => {
    for (const clone of clones) {
      assert.equal(clone.vm.running, true);
      assert.equal((await sh(clone, `${clone.name}-alive`, "echo alive")).trim(), "alive");
    }
  });

  it("gives each clone its own random bytes, boot id, hostname and MAC", async () => {
    const script = "head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo; cat /proc/sys/kernel/random/boot_id /proc/sys/kernel/hostname /sys/class/net/eth0/address";
    const seen = await Promise.all(clones.map(async (c) => (await sh(c, `${c.name}-identity`, script)).trim().split("\n")));
    const [a, b] = seen as [string[], string[]];
    assert.equal(a.length, 4, a.join("|"));
    assert.match(a[0]!, /^[0-9a-f]{64}$/);
    assert.notEqual(a[0], b[0], "the same random bytes in two clones");
    assert.notEqual(a[1], b[1], "the same boot id in two clones");
    assert.deepEqual([a[2], b[2]], clones.map((c) => c.hostname));
    assert.deepEqual([a[3], b[3]], clones.map((c) => c.mac));
  });

  it("sets each clone's wall clock from the host's configure, not the template's saved time", async () => {
    const [c1, c2] = clones as [Clone, Clone];
    const now = Date.now() / 1000;
    const [t1, t2] = await Promise.all([sh(c1, "c1-clock", "date +%s"), sh(c2, "c2-clock", "date +%s")]);
    assert.ok(Math.abs(Number(t1) - now) < 120, `c1 reads ${t1}, the host ${now}`);
    assert.ok(Math.abs(Number(t2) - (now + DAY_MS / 1000)) < 120, `c2 reads ${t2}, a day after the host's ${now}`);
  });

  it("keeps what one clone writes to memory or disk from the other and from the template", async () => {
    const [c1, c2] = clones as [Clone, Clone];
    await sh(c1, "c1-write", "echo c1 > /tmp/in-memory && echo c1 > /var/on-disk && sync");
    assert.equal((await sh(c2, "c2-look", "cat /tmp/in-memory /var/on-disk 2>/dev/null; echo done")).trim(), "done");
    assert.equal((await sh(c1, "c1-look", "cat /tmp/in-memory /var/on-disk")).trim(), "c1\nc1");
    assert.equal(await sha256File(memoryFile), templateMemoryDigest, "a clone wrote through to the template's RAM file");
    assert.equal(await sha256File(templateScratch), templateScratchDigest, "a clone wrote to the template's disk");
  });

  it("leaves nothing sent after restore in any snapshot file: the exit-record key, a setup token", async () => {
    const [c1] = clones as [Clone];
    // The token sits in the clone's memory (environment, a tmpfs file) and on its own disk.
    await sh(c1, "c1-token", "echo \"$IMP_TEST_TOKEN\" > /tmp/token && echo \"$IMP_TEST_TOKEN\" > /var/token && sync && cat /tmp/token", { IMP_TEST_TOKEN: token });
    for (const path of [statePath, memoryFile, templateScratch]) {
      assert.equal(await fileContains(path, Buffer.from(token)), false, `the token is in ${path}`);
      assert.equal(await fileContains(path, exitKey), false, `the exit-record key is in ${path}`);
    }
    // The scan can find what is there: the clone's own disk holds the token it wrote.
    assert.equal(await fileContains(join(dir, "c1-scratch.ext4"), Buffer.from(token)), true, "the scan did not find the token on the clone's own disk");
  });

  it("fails a restore from a damaged device state at once, in QEMU's words, leaving nothing running", async () => {
    const bad = join(dir, "damaged.state");
    await run("sh", ["-c", `head -c 20000 ${statePath} > ${bad}`]);
    const scratch = join(dir, "damaged-scratch.ext4");
    await run("cp", ["--sparse=always", templateScratch, scratch]);
    const vmDir = join(dir, "damaged");
    await assert.rejects(
      QemuVm.start({ dir: vmDir, channel: "serial", dieWithParent: true, machine: machineWith(scratch), snapshot: { role: "restore", memoryFile, statePath: bad }, snapshotLoadTimeoutMs: 120_000 }),
      (err: Error & { code?: string }) => {
        assert.equal(err.code, "SnapshotLoadFailed", err.message);
        assert.match(err.message, /QEMU exited while loading it.*qemu: /s);
        return true;
      },
    );
    assert.deepEqual(await processesMentioning(vmDir), [], "a QEMU of the failed restore is left");
  });
});
