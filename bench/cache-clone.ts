/**
 * What a cache volume costs a job VM before it runs: creating its copy-on-write clone of the pool's
 * generation (src/agent/cache/), at 1 GiB and 10 GiB holding the same data, beside a plain sparse
 * copy of the same generation (what a node without copy-on-write would do), alternating in one run so
 * the machine's noise falls on all alike. Also the promotion of a clone (off any job's path).
 *
 *   node bench/cache-clone.ts [--rounds 5] [--data-mib 256]   (npm run bench:cache-clone)
 */
import { execFile } from "node:child_process";
import { mkdtemp, rm, stat } from "node:fs/promises";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs, promisify } from "node:util";
import { cloneGeneration, createEmptyGeneration, promoteClone } from "../src/agent/cache/index.ts";
import { median, percentile, table } from "./stats.ts";

const run = promisify(execFile);
const { values } = parseArgs({ options: { rounds: { type: "string", default: "5" }, "data-mib": { type: "string", default: "256" } } });
const rounds = Number(values.rounds);
const dataMiB = Number(values["data-mib"]);
const dir = await mkdtemp(join(tmpdir(), "imp-bench-cache-"));
const GiB = 1024 ** 3;

try {
  // Two generations holding the same data (written through QEMU's block layer past mkfs's metadata).
  const sizes = [1, 10] as const;
  const gens = new Map<number, string>();
  for (const size of sizes) {
    const gen = await createEmptyGeneration(dir, `g${size}`, size * GiB);
    await run("qemu-io", ["-f", "raw", "-c", `write -P 0x5a 64M ${dataMiB}M`, gen]);
    gens.set(size, gen);
  }
  const samples = new Map<string, number[]>();
  const note = (k: string, ms: number): void => void samples.set(k, [...(samples.get(k) ?? []), ms]);
  let n = 0;
  for (let r = 0; r < rounds; r++) {
    for (const size of sizes) {
      const gen = gens.get(size) ?? "";
      const clone = join(dir, `c${++n}.qcow2`);
      let t = performance.now();
      await cloneGeneration(gen, clone);
      note(`clone (qcow2) ${size} GiB`, performance.now() - t);
      await rm(clone);
      const copy = join(dir, `c${n}.raw`);
      t = performance.now();
      await run("cp", ["--sparse=always", gen, copy]);
      note(`sparse copy ${size} GiB`, performance.now() - t);
      await rm(copy);
    }
  }
  // Promotion: a clone of the 1 GiB generation with 64 MiB of its data rewritten.
  const clone = join(dir, "promote.qcow2");
  await cloneGeneration(gens.get(1) ?? "", clone);
  await run("qemu-io", ["-f", "qcow2", "-c", "write -P 0x6b 64M 64M", clone]);
  const t = performance.now();
  const next = await promoteClone(clone, gens.get(1) ?? "", dir, "next");
  const promoteMs = performance.now() - t;
  const allocated = async (p: string): Promise<number> => ((await stat(p)).blocks * 512) / 2 ** 20;

  const rows = [...samples].map(([k, v]) => [k, v.length, median(v).toFixed(1), percentile(v, 95).toFixed(1)]);
  table(`Cache volume: a job VM's clone of a generation holding ${dataMiB} MiB (${rounds} rounds, load ${loadavg()[0]?.toFixed(1) ?? "?"})`, ["operation", "n", "median ms", "p95 ms"], rows);
  const ratio = (a: string, b: string): string => {
    const x = samples.get(a);
    const y = samples.get(b);
    return x === undefined || y === undefined ? "no sample" : `${(median(x) / median(y)).toFixed(2)}×`;
  };
  table("Side by side", ["comparison", "ratio of medians"], [
    ["clone 10 GiB / clone 1 GiB (goal: equal within noise)", ratio("clone (qcow2) 10 GiB", "clone (qcow2) 1 GiB")],
    ["clone 1 GiB / sparse copy 1 GiB", ratio("clone (qcow2) 1 GiB", "sparse copy 1 GiB")],
  ]);
  table("Promotion (off the job's path)", ["what", "value"], [
    ["clone with 64 MiB rewritten → new generation", `${promoteMs.toFixed(0)} ms`],
    ["new generation on disk", `${(await allocated(next)).toFixed(0)} MiB of ${((await stat(next)).size / 2 ** 20).toFixed(0)} MiB`],
  ]);
} finally {
  await rm(dir, { recursive: true, force: true });
}
