/**
 * Boot against restore from a memory snapshot, on real QEMU (TCG, 1 vCPU, the boot kit's kernel and
 * the real guest agent as PID 1), side by side in one run and alternating, so the machine's noise
 * falls on both alike:
 *   boot:    spawn QEMU → guest agent hello (the job VM's cold start today);
 *   restore-copy:   the node agent's restore: the VM's own sparse copy of the template's RAM file
 *                   (QEMU 7.2 opens a RAM file read-write), then QEMU with -incoming defer → device
 *                   state loaded → resumed → hello; the copy is inside the timing;
 *   restore-shared: the same, mapping the template's one RAM file privately (copy-on-write) — faster,
 *                   but a VM whose QEMU a job took over could write the file other VMs map;
 * then for each VM the configure a job VM gets (entropy, clock, hostname, MAC, address) and one exec,
 * and QEMU's resident memory with the guest idle after it. Also: the template's boot, its save, the
 * device state's size and the RAM file's size on disk — what an idle snapshot slot costs.
 *
 *   node bench/snapshot.ts [--rounds 5] [--memory 512]   (npm run bench:snapshot)
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs, promisify } from "node:util";
import { readHostTscKhz } from "../src/agent/index.ts";
import { connectGuest } from "../src/agent/vm/index.ts";
import { QemuVm, type QemuVmOptions } from "../src/agent/vmm/index.ts";
import { loadBootKit, makeScratchDisk, runExec } from "../test/harness/vm.ts";
import { median, percentile, table } from "./stats.ts";

const run = promisify(execFile);
const { values } = parseArgs({ options: { rounds: { type: "string", default: "5" }, memory: { type: "string", default: "512" } } });
const rounds = Number(values.rounds);
const memoryMiB = Number(values.memory);
const kit = await loadBootKit();
const dir = await mkdtemp(join(tmpdir(), "imp-bench-snap-"));
const tscKhz = await readHostTscKhz();

const machine = (scratch: string): QemuVmOptions["machine"] => ({
  kernel: kit.kernel,
  initrd: kit.initrd,
  cmdline: ["console=ttyS0", "quiet", "panic=-1", "ro", "root=/dev/vda", `init=${kit.guestInit}`, "imp.scratch=/dev/vdb"],
  memoryMiB,
  vcpus: 1,
  accel: "tcg",
  ...(tscKhz === undefined ? {} : { tscKhz }),
  drives: [{ id: "root", path: kit.rootfs, readOnly: true }, { id: "scratch", path: scratch }],
  userNetwork: true,
});

const rssMiB = async (pid: number): Promise<number> => Number(/VmRSS:\s+(\d+) kB/.exec(await readFile(`/proc/${pid}/status`, "utf8"))?.[1] ?? Number.NaN) / 1024;
const allocatedMiB = async (path: string): Promise<number> => ((await stat(path)).blocks * 512) / 2 ** 20;

interface Sample {
  readonly readyMs: number;
  readonly firstExecMs: number;
  readonly rssMiB: number;
}
type Kind = "boot" | "restore-copy" | "restore-shared";
const KINDS: readonly Kind[] = ["boot", "restore-copy", "restore-shared"];
const samples: Record<Kind, Sample[]> = { boot: [], "restore-copy": [], "restore-shared": [] };

/** One VM to a ready guest, its configure and one exec, its idle RSS; always stopped. */
async function once(kind: Kind, i: number, template: { memoryFile: string; statePath: string; scratch: string }): Promise<void> {
  const scratch = join(dir, `${kind}-${i}.ext4`);
  const ownMemory = join(dir, `${kind}-${i}.mem`);
  if (kind === "boot") await makeScratchDisk(scratch, 256);
  const started = performance.now();
  if (kind !== "boot") await run("cp", ["--sparse=always", "--reflink=auto", template.scratch, scratch]);
  if (kind === "restore-copy") await run("cp", ["--sparse=always", "--reflink=auto", template.memoryFile, ownMemory]);
  const memoryFile = kind === "restore-copy" ? ownMemory : template.memoryFile;
  const vm = await QemuVm.start({ dir: join(dir, `${kind}-${i}`), channel: "serial", dieWithParent: true, machine: machine(scratch), ...(kind === "boot" ? {} : { snapshot: { role: "restore" as const, memoryFile, statePath: template.statePath } }) });
  try {
    const client = await connectGuest(vm, { timeoutMs: 120_000, serial: true, clientName: "imp-bench" });
    await client.hello();
    const readyMs = performance.now() - started;
    await client.configure({ hostname: `${kind}-${i}`, entropySeed: randomBytes(64), exitRecordKey: randomBytes(32), unixTimeMs: Date.now(), network: { interface: "eth0", address: "10.0.2.15/24", gateway: "10.0.2.2", mac: "02:00:0a:00:02:0f" } });
    const result = await runExec(client, { execId: `${kind}-${i}`, argv: ["/bin/sh", "-c", "cat /proc/sys/kernel/hostname"], env: { PATH: "/bin" } });
    if (result.stdout.trim() !== `${kind}-${i}`) throw new Error(`${kind}-${i}: the guest says it is ${result.stdout.trim()}`);
    const firstExecMs = performance.now() - started;
    samples[kind].push({ readyMs, firstExecMs, rssMiB: await rssMiB(vm.pid) });
    client.close();
  } finally {
    await vm.stop();
    await rm(scratch, { force: true });
    await rm(ownMemory, { force: true });
  }
}

try {
  const templateScratch = join(dir, "template-scratch.ext4");
  await makeScratchDisk(templateScratch, 256);
  const memoryFile = join(dir, "template.mem");
  const statePath = join(dir, "template.state");
  const started = performance.now();
  const template = await QemuVm.start({ dir: join(dir, "template"), channel: "serial", dieWithParent: true, machine: machine(templateScratch), snapshot: { role: "template", memoryFile } });
  const client = await connectGuest(template, { timeoutMs: 120_000, serial: true, clientName: "imp-bench" });
  await client.hello();
  const templateBootMs = performance.now() - started;
  client.close();
  const saved = await template.saveSnapshot(statePath, { timeoutMs: 60_000 });
  const loads: number[] = [];
  for (let i = 0; i < rounds; i++) {
    for (const kind of KINDS) {
      loads.push(loadavg()[0] ?? Number.NaN);
      await once(kind, i, { memoryFile, statePath, scratch: templateScratch });
    }
  }
  const row = (kind: Kind): (string | number)[] => {
    const s = samples[kind];
    return [kind, s.length, median(s.map((x) => x.readyMs)), percentile(s.map((x) => x.readyMs), 95), median(s.map((x) => x.firstExecMs)), percentile(s.map((x) => x.firstExecMs), 95), median(s.map((x) => x.rssMiB))];
  };
  table(`Boot vs restore from a memory snapshot (QEMU 7.2, TCG, 1 vCPU, ${memoryMiB} MiB, ${rounds} each, alternating)`, ["start", "VMs", "→ hello p50 ms", "p95 ms", "→ first exec done p50 ms", "p95 ms", "QEMU RSS idle p50 MiB"], KINDS.map(row));
  table("The snapshot", ["what", "value"], [
    ["template boot, spawn → hello", `${Math.round(templateBootMs)} ms`],
    ["save (pause, device state, over QMP)", `${Math.round(saved.ms)} ms`],
    ["device state", `${(saved.stateBytes / 1024).toFixed(0)} KiB`],
    ["RAM file, allocated on disk", `${(await allocatedMiB(memoryFile)).toFixed(0)} MiB of ${memoryMiB} MiB`],
    ["template scratch disk, allocated", `${(await allocatedMiB(templateScratch)).toFixed(1)} MiB`],
  ]);
  const ratio = (kind: Kind, f: (s: Sample) => number): string => (median(samples[kind].map(f)) / median(samples.boot.map(f))).toFixed(2);
  const sortedLoads = [...loads].sort((a, b) => a - b);
  for (const kind of ["restore-copy", "restore-shared"] as const) {
    process.stdout.write(`\n${kind}/boot median: → hello ${ratio(kind, (s) => s.readyMs)}×, first exec done ${ratio(kind, (s) => s.firstExecMs)}×, idle RSS ${ratio(kind, (s) => s.rssMiB)}×`);
  }
  process.stdout.write(`\nTimed from the first copy (restores) or from spawning QEMU (boot); load average (1 min) median ${percentile(sortedLoads, 50).toFixed(1)}\n`);
} finally {
  await rm(dir, { recursive: true, force: true });
}
