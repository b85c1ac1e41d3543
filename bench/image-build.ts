/**
 * Benchmark of the image build side (npm run bench:image). Prints tables; asserts nothing.
 *
 * 1. Cold build of a multi-layer image (a few hundred MB unpacked) from a real registry on loopback:
 *    Imp (pull into a fresh content store + unpack + mkfs.ext4 -d) against the reference pipeline
 *    `skopeo copy` → `umoci unpack` → `mkfs.ext4 -d` with the same mkfs arguments, same registry,
 *    alternating order, several runs. Goal: ratio Imp/reference ≤ 1.0.
 * 2. Per-VM disk preparation on a warm cache (hard link of the base + scratch from template) for a
 *    small and a 1 GiB image: median and p95. Goal: ≤ 20 ms, independent of image size.
 *
 * `--smoke` runs everything at tiny sizes once (used by a test to keep this script working).
 */
import { execFileSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { pack } from "tar-stream";
import { BaseImages, fileDigestOf, ImageCache } from "../src/agent/image/cache/index.ts";
import { prepareVmDisks, releaseVmDisks, ScratchTemplates } from "../src/agent/image/disks/index.ts";
import { defaultBaseParams, planExt4 } from "../src/agent/image/ext4/index.ts";
import { layerBlobsOf, type LayerBlob } from "../src/agent/image/layers/index.ts";
import { FsContentStore, pullImage } from "../src/agent/image/pull/index.ts";
import { buildImage, buildLayer, type LayerEntry } from "../test/harness/oci-image.ts";
import { pushImage, startRegistry } from "../test/harness/registry.ts";
import { percentile, table } from "./stats.ts";

const smoke = process.argv.includes("--smoke");
const scale = smoke ? 0.01 : 1;
const runs = smoke ? 1 : Number(process.env.IMP_BENCH_RUNS ?? 3);
const vmIterations = smoke ? 5 : 100;
const bigImageBytes = smoke ? 16 * 1024 ** 2 : 1024 ** 3;

const WORDS = "the of and to in is for on that with as by at from it an be this which or are was not but have all were can more one their has other when into also any been its two some new only time these first may such like over most used those".split(" ");

/** ~8 MiB of text-like bytes (compresses about 3:1 like typical image content) mixed with random runs. */
function contentPool(): Buffer {
  const parts: Buffer[] = [];
  let size = 0;
  while (size < 8 * 1024 ** 2) {
    const chunk = Math.random() < 0.25 ? randomBytes(512) : Buffer.from(Array.from({ length: 120 }, () => WORDS[Math.floor(Math.random() * WORDS.length)]).join(" "));
    parts.push(chunk);
    size += chunk.length;
  }
  return Buffer.concat(parts);
}

function slice(pool: Buffer, bytes: number): Buffer {
  const start = Math.floor(Math.random() * (pool.length - bytes));
  return pool.subarray(start, start + bytes);
}

const between = (lo: number, hi: number): number => Math.floor(lo + Math.random() * (hi - lo));

/** Four layers: many small files, medium files, large files (+ whiteouts, links), a runner-like layer. */
function benchLayers(pool: Buffer): LayerEntry[][] {
  const small: LayerEntry[] = [];
  for (let i = 0; i < Math.ceil(6000 * scale); i++) small.push({ path: `usr/share/pkg${i % 60}/d${i % 7}/f${i}.txt`, content: slice(pool, between(1024, 16 * 1024)) });
  const medium: LayerEntry[] = [];
  for (let i = 0; i < Math.ceil(200 * scale); i++) medium.push({ path: `usr/lib/lib${i}.so`, content: slice(pool, between(100 * 1024, 1024 ** 2)), mode: 0o755 });
  const large: LayerEntry[] = [{ path: "usr/share/pkg0/d0/.wh.f0.txt" }, { path: "opt/big/link", type: "symlink", linkname: "data0.bin" }];
  for (let i = 0; i < Math.ceil(20 * scale); i++) large.push({ path: `opt/big/data${i}.bin`, content: Buffer.concat([slice(pool, 4 * 1024 ** 2), slice(pool, between(0, 4 * 1024 ** 2))]) });
  const runner: LayerEntry[] = [];
  for (let i = 0; i < Math.ceil(500 * scale); i++) runner.push({ path: `opt/runner/bin/m${i}.js`, content: slice(pool, between(2 * 1024, 40 * 1024)) });
  return [small, medium, large, runner];
}

const ms = (start: bigint): number => Number(process.hrtime.bigint() - start) / 1e6;

async function main(): Promise<void> {
  const work = await mkdtemp(join(process.env.IMP_BENCH_DIR ?? tmpdir(), "imp-bench-"));
  const registry = await startRegistry({ rootDir: join(work, "registry") });
  try {
    const guest = join(work, "imp-guest");
    await writeFile(guest, randomBytes(8 * 1024 ** 2), { mode: 0o755 });
    const guestAgent = { path: guest, digest: await fileDigestOf(guest) };
    process.stdout.write(`generating image (scale ${scale})…\n`);
    const layerEntries = benchLayers(contentPool());
    const entryCount = layerEntries.reduce((s, l) => s + l.length, 0);
    const layers = await Promise.all(layerEntries.map((entries) => buildLayer(entries, "gzip")));
    const image = buildImage(layers);
    const reference = `${registry.host}/bench/image:1`;
    await pushImage(registry.url, "bench/image", "1", image);
    const compressed = layers.reduce((s, l) => s + l.size, 0);
    const unpacked = layerEntries.flat().reduce((s, e) => s + (e.content?.length ?? 0), 0);
    process.stdout.write(`image: ${layers.length} layers, ${(compressed / 1024 ** 2).toFixed(1)} MiB compressed\n`);

    const rows: (string | number)[][] = [];
    const ratios: number[] = [];
    for (let run = 1; run <= runs; run++) {
      const order = run % 2 === 1 ? ["imp", "ref"] : ["ref", "imp"];
      const times: Record<string, number> = {};
      let phases = "";
      for (const who of order) {
        const dir = join(work, `run${run}-${who}`);
        await mkdir(dir);
        if (who === "imp") {
          const start = process.hrtime.bigint();
          const store = await FsContentStore.open(join(dir, "store"));
          const pulled = await pullImage(reference, { store, recordRefs: false });
          const pulledMs = ms(start);
          const cache = await ImageCache.open({ root: join(dir, "cache"), maxBytes: 64 * 1024 ** 3 });
          let unpackMs = 0;
          await new BaseImages({ cache }).ensure({ layers: layerBlobsOf(pulled, store), guestAgent }, { onEvent: (e) => { if (e.kind === "unpacked") unpackMs = e.ms; } });
          times.imp = ms(start);
          phases = `pull ${pulledMs.toFixed(0)} / unpack ${unpackMs.toFixed(0)} / mkfs ${(times.imp - pulledMs - unpackMs).toFixed(0)}`;
        } else {
          times.ref = referencePipeline(reference, dir, unpacked, entryCount);
        }
        await rm(dir, { recursive: true, force: true });
      }
      const ratio = (times.imp ?? NaN) / (times.ref ?? NaN);
      ratios.push(ratio);
      rows.push([run, times.imp ?? NaN, times.ref ?? NaN, ratio, phases]);
    }
    rows.push(["median", percentile(rows.map((r) => r[1] as number), 50), percentile(rows.map((r) => r[2] as number), 50), percentile(ratios, 50), ""]);
    table(`Cold build, ${(unpacked / 1024 ** 2).toFixed(0)} MiB tar in ${layers.length} layers (goal: ratio ≤ 1.0; load average ${loadavg()[0]?.toFixed(1)})`, ["run", "imp ms", "skopeo+umoci+mkfs ms", "ratio", "imp phases ms"], rows);

    const small = layers.slice(3).map((l): LayerBlob => ({ digest: l.digest, mediaType: l.mediaType, open: () => Promise.resolve(Readable.from([l.bytes])) }));
    await perVmDisks(work, guestAgent, small);
  } finally {
    await registry.stop();
    await rm(work, { recursive: true, force: true });
  }
}

/** skopeo copy → umoci unpack → mkfs.ext4 -d with the arguments Imp uses. Returns milliseconds. */
function referencePipeline(reference: string, dir: string, tarBytes: number, entries: number): number {
  const plan = planExt4({ entries: entries + 1000, fileBytes: tarBytes }, defaultBaseParams());
  const start = process.hrtime.bigint();
  const run = (cmd: string, args: string[]): void => void execFileSync(cmd, args, { stdio: ["ignore", "ignore", "pipe"] });
  run("skopeo", ["--insecure-policy", "copy", "--quiet", "--src-tls-verify=false", `docker://${reference}`, `oci:${join(dir, "layout")}:1`]);
  run("umoci", ["unpack", "--image", `${join(dir, "layout")}:1`, join(dir, "bundle")]);
  run("mkfs.ext4", ["-q", "-F", "-t", "ext4", "-b", "4096", "-I", "256", "-N", String(plan.inodes), "-m", "0", "-O", "^has_journal", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", "-d", join(dir, "bundle", "rootfs"), join(dir, "ref.ext4"), `${plan.sizeBytes / 1024}k`]);
  return ms(start);
}

/**
 * A layer streaming `bytes` of data in 64 MiB files without holding them in memory. Every open yields
 * the same bytes (one random block, fixed mtimes), and the digest is the real sha256 of them, taken by
 * streaming the layer once: the build verifies what it applies.
 */
async function syntheticLayer(bytes: number): Promise<LayerBlob> {
  const block = randomBytes(1024 ** 2);
  const open = (): Promise<Readable> => {
    const packer = pack();
    void (async () => {
      const fileBytes = Math.min(bytes, 64 * 1024 ** 2);
      for (let i = 0; i * fileBytes < bytes; i++) {
        const entry = packer.entry({ name: `data/part${i}.bin`, size: fileBytes, mode: 0o644, mtime: new Date(0) });
        for (let done = 0; done < fileBytes; done += block.length) {
          if (!entry.write(block.subarray(0, Math.min(block.length, fileBytes - done)))) await new Promise<void>((r) => entry.once("drain", () => r()));
        }
        (entry as unknown as { end(): void }).end();
      }
      packer.finalize();
    })();
    return Promise.resolve(Readable.from(packer as unknown as AsyncIterable<Buffer>));
  };
  const hash = createHash("sha256");
  for await (const chunk of await open()) hash.update(chunk as Buffer);
  return { digest: `sha256:${hash.digest("hex")}`, mediaType: "application/vnd.oci.image.layer.v1.tar", open };
}

async function perVmDisks(work: string, guestAgent: { path: string; digest: string }, smallLayers: readonly LayerBlob[]): Promise<void> {
  const root = join(work, "warm");
  const cache = await ImageCache.open({ root, maxBytes: 64 * 1024 ** 3 });
  const images = new BaseImages({ cache });
  const templates = new ScratchTemplates(join(root, "scratch"));
  const scratch = { sizeBytes: 10 * 1024 ** 3 };
  const rows: (string | number)[][] = [];
  const cases: [string, readonly LayerBlob[]][] = [["small", smallLayers], [`${(bigImageBytes / 1024 ** 3).toFixed(2)} GiB`, [await syntheticLayer(bigImageBytes)]]];
  for (const [name, layers] of cases) {
    const image = await images.ensure({ layers, guestAgent });
    await prepareVmDisks(await mkdtemp(join(root, "warmup-")), image, templates, scratch);
    // Flush what the builds before left dirty, so writeback of earlier phases does not land in these samples.
    execFileSync("sync");
    const samples: number[] = [];
    const methods = new Map<string, number>();
    for (let i = 0; i < vmIterations; i++) {
      const vmDir = join(root, `vm-${name.replace(/\W/g, "")}-${i}`);
      await mkdir(vmDir);
      // VMs start seconds apart in practice: let the background refill of spare scratch disks finish (untimed).
      await templates.warm(scratch);
      const start = process.hrtime.bigint();
      const looked = await cache.lookup(image.key);
      if (looked === undefined) throw new Error("warm image vanished");
      const disks = await prepareVmDisks(vmDir, looked, templates, scratch);
      samples.push(ms(start));
      methods.set(disks.scratchMethod, (methods.get(disks.scratchMethod) ?? 0) + 1);
      await releaseVmDisks(vmDir);
    }
    rows.push([name, (image.sizeBytes / 1024 ** 2).toFixed(0), vmIterations, percentile(samples, 50), percentile(samples, 95), [...methods].map(([m, n]) => `${m} ${n}`).join(", ")]);
  }
  table(`Per-VM disks on a warm cache: lookup + hard-link base + 10 GiB scratch (goal ≤ 20 ms; load average ${loadavg()[0]?.toFixed(1)})`, ["image", "image MiB", "n", "median ms", "p95 ms", "scratch disks made by"], rows);
}

await main();
