/**
 * `imp image build REF` and `imp image gc`: the node's ext4 base images, usable without
 * Kubernetes. `build` uses the image as pulled into the content store (pulling it first when the
 * store has no record of it), adds local extra layers and the guest agent, and prints where the
 * cached image is. `gc` evicts least-recently-used images no VM uses, down to the size limit.
 */
import type { Command } from "commander";
import { join } from "node:path";
import type { BuildEvent, LayerBlob } from "../../../agent/index.ts";
import { cacheDir as impCacheDir } from "../../../devcluster/index.ts";
import { BaseImages, fileDigestOf, FsContentStore, ImagePuller, ImageCache, ImageRefs, layerBlobsOf, localLayer } from "../../../agent/index.ts";
import { humanBytes, shortDigest, storeDir, table, withStoreOption } from "./common.ts";

export const DEFAULT_IMAGE_CACHE = "/var/lib/imp/rootfs";
const DEFAULT_MAX_BYTES = 50 * 1024 ** 3;

interface CacheOpts {
  cache?: string;
  maxBytes?: string;
}

const cacheDir = (opts: CacheOpts): string => opts.cache ?? process.env.IMP_IMAGE_CACHE ?? DEFAULT_IMAGE_CACHE;

function maxBytes(opts: CacheOpts): number {
  const text = opts.maxBytes ?? process.env.IMP_IMAGE_CACHE_MAX_BYTES;
  if (text === undefined) return DEFAULT_MAX_BYTES;
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 0) throw new Error(`Cannot use --max-bytes ${JSON.stringify(text)}: write a whole number of bytes`);
  return value;
}

const withCacheOptions = (command: Command): Command =>
  command
    .option("--cache <dir>", `base image cache directory (default: $IMP_IMAGE_CACHE or ${DEFAULT_IMAGE_CACHE})`)
    .option("--max-bytes <n>", "cache size limit for eviction (default: $IMP_IMAGE_CACHE_MAX_BYTES or 50 GiB)");

interface BuildOpts extends CacheOpts {
  store?: string;
  guest?: string;
  layer: string[];
  plainHttp?: boolean;
  diskStaging?: boolean;
  quiet?: boolean;
}

export function registerImageBuild(image: Command): void {
  withCacheOptions(withStoreOption(image.command("build")))
    .argument("<reference>", "image reference (pulled first when the content store has no record of it)")
    .description("build (or find in the cache) the ext4 base image of an image plus extra layers and the guest agent")
    .option("--guest <path>", "guest agent binary to inject at /.imp/imp-guest (default: $IMP_GUEST or $IMP_CACHE/guest/imp-guest)")
    .option("--layer <file>", "extra layer (tar, tar.gz or tar.zst) applied on top, in order; repeatable", (v: string, acc: string[]) => [...acc, v], [])
    .option("--plain-http", "speak plain HTTP to the registry when pulling")
    .option("--disk-staging", "unpack on disk even when the image fits the memory staging area (/dev/shm)")
    .option("-q, --quiet", "print only the image path")
    .action(async (reference: string, opts: BuildOpts) => {
      const store = await FsContentStore.open(storeDir(opts));
      const record = (await new ImageRefs(store.root).get(reference)) ??
        (await new ImagePuller(opts.plainHttp === true ? { plainHttp: () => true } : {}).pull(reference, { store }));
      const extra: LayerBlob[] = [];
      for (const file of opts.layer) extra.push(await localLayer(file));
      const guestPath = opts.guest ?? process.env.IMP_GUEST ?? join(impCacheDir(), "guest", "imp-guest");
      const cache = await ImageCache.open({ root: cacheDir(opts), maxBytes: maxBytes(opts) });
      const started = Date.now();
      const log = (event: BuildEvent): void => {
        if (opts.quiet === true) return;
        if (event.kind === "layer-applied") process.stderr.write(`applied layer ${event.index + 1} ${shortDigest(event.digest)} in ${event.ms} ms\n`);
        if (event.kind === "unpacked") process.stderr.write(`unpacked ${event.entries} entries (${humanBytes(event.fileBytes)}) in ${event.ms} ms, staged in ${event.staging}\n`);
        if (event.kind === "ext4-built") process.stderr.write(`made ext4 (${humanBytes(event.sizeBytes)} apparent) in ${event.ms} ms\n`);
      };
      const result = await new BaseImages({ cache, ...(opts.diskStaging === true ? { staging: null } : {}) }).ensure(
        { layers: [...layerBlobsOf(record, store), ...extra], guestAgent: { path: guestPath, digest: await fileDigestOf(guestPath) } },
        { onEvent: log },
      );
      if (opts.quiet === true) {
        process.stdout.write(`${result.path}\n`);
        return;
      }
      process.stdout.write(
        `${record.reference}\n  key     ${result.key}\n  image   ${result.path}\n  size    ${humanBytes(result.sizeBytes)} on disk\n` +
          `  ${result.built ? `built in ${((Date.now() - started) / 1000).toFixed(1)} s` : "from cache"}\n`,
      );
    });
}

export function registerImageGc(image: Command): void {
  withCacheOptions(image.command("gc"))
    .description("evict least-recently-used base images that no VM uses, down to the cache size limit")
    .option("--list", "only list cached base images")
    .option("--grace-seconds <n>", "never evict images used this recently (default 600: time for a caller to link what it was handed)")
    .action(async (opts: CacheOpts & { list?: boolean; graceSeconds?: string }) => {
      const grace = opts.graceSeconds === undefined ? undefined : Number(opts.graceSeconds);
      if (grace !== undefined && !(Number.isFinite(grace) && grace >= 0)) {
        throw new Error(`Cannot use --grace-seconds ${JSON.stringify(opts.graceSeconds)}: write a number of seconds`);
      }
      const cache = await ImageCache.open({ root: cacheDir(opts), maxBytes: maxBytes(opts), ...(grace === undefined ? {} : { graceMs: grace * 1000 }) });
      if (opts.list !== true) {
        const result = await cache.gc();
        for (const key of result.evicted) process.stdout.write(`evicted ${key}\n`);
        process.stdout.write(`freed ${humanBytes(result.freedBytes)}; cache holds ${humanBytes(result.totalBytes)} (limit ${humanBytes(cache.maxBytes)})\n`);
      }
      const rows = (await cache.list()).sort((a, b) => b.lastUsedMs - a.lastUsedMs)
        .map((e) => [e.key.slice(0, 12), humanBytes(e.sizeBytes), new Date(e.lastUsedMs).toISOString(), e.inUse ? "in use" : "-"]);
      process.stdout.write(table([["KEY", "SIZE", "LAST USED", "VMS"], ...rows]));
    });
}
