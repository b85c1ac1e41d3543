/**
 * Pull throughput from a real docker-registry on loopback into a fresh content store (fsync'd,
 * sha256-verified). Builds an image of incompressible random layers (default 6 x 50 MiB), pushes it,
 * pulls it at several concurrency settings, and prints a table.
 *
 *   node bench/image-pull.ts [--layers 6] [--layer-mib 50] [--runs 2]
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { FsContentStore, pullImage } from "../src/agent/image/pull/index.ts";
import { buildImage, randomLayer } from "../test/harness/oci-image.ts";
import { pushImage, startRegistry } from "../test/harness/registry.ts";

const { values } = parseArgs({ options: { layers: { type: "string", default: "6" }, "layer-mib": { type: "string", default: "50" }, runs: { type: "string", default: "2" } } });
const layerCount = Number(values.layers);
const layerBytes = Number(values["layer-mib"]) * 1024 * 1024;
const runs = Number(values.runs);
const platform = { os: "linux", architecture: "amd64" };

const work = await mkdtemp(join(tmpdir(), "imp-bench-pull-"));
const registry = await startRegistry();
try {
  const layers = [];
  for (let i = 0; i < layerCount; i++) layers.push(await randomLayer(layerBytes, "none"));
  const image = buildImage(layers, { platform });
  await pushImage(registry.url, "bench/big", "1", image);
  const total = layers.reduce((sum, l) => sum + l.size, 0);
  const rows: string[][] = [["concurrency", "run", "bytes", "seconds", "MiB/s"]];
  for (const concurrency of [1, 3, 6]) {
    for (let run = 1; run <= runs; run++) {
      const root = join(work, `store-${concurrency}-${run}`);
      const store = await FsContentStore.open(root);
      const started = performance.now();
      await pullImage(`${registry.host}/bench/big:1`, { store, platform, concurrency });
      const seconds = (performance.now() - started) / 1000;
      rows.push([String(concurrency), String(run), String(total), seconds.toFixed(2), (total / 1024 / 1024 / seconds).toFixed(1)]);
      await rm(root, { recursive: true, force: true });
    }
  }
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? "").length))) ?? [];
  process.stdout.write(`pull of ${layerCount} x ${values["layer-mib"]} MiB uncompressed random layers from docker-registry on loopback\n`);
  for (const r of rows) process.stdout.write(`${r.map((c, i) => c.padStart(widths[i] ?? 0)).join("  ")}\n`);
} finally {
  await registry.stop();
  await rm(work, { recursive: true, force: true });
}
