/** `imp image rm REF...`: forgets images and deletes their blobs that no remaining image uses. */
import type { Command } from "commander";
import type { ImageRecord } from "../../../agent/index.ts";
import { FsContentStore, formatReference, ImageRefs, parseReference } from "../../../agent/index.ts";
import { humanBytes, storeDir, withStoreOption } from "./common.ts";

const blobsOf = (r: ImageRecord): string[] => [r.manifestDigest, r.configDigest, ...(r.indexDigest === undefined ? [] : [r.indexDigest]), ...r.layers.map((l) => l.digest)];

export function registerImageRm(image: Command): void {
  withStoreOption(image.command("rm"))
    .alias("remove")
    .argument("<references...>", "references as `imp image ls` prints them")
    .description("remove images and the blobs only they use")
    .option("--keep-blobs", "forget the references but keep every blob")
    .action(async (references: string[], opts: { store?: string; keepBlobs?: boolean }) => {
      const root = storeDir(opts);
      const refs = new ImageRefs(root);
      const store = await FsContentStore.open(root);
      const missing: string[] = [];
      for (const given of references) {
        const reference = normalise(given);
        const record = await refs.get(reference);
        if (record === undefined || !(await refs.remove(reference))) {
          missing.push(given);
          continue;
        }
        let freed = 0;
        let count = 0;
        if (opts.keepBlobs !== true) {
          const stillUsed = new Set((await refs.list()).flatMap(blobsOf));
          const sizes = new Map((await store.list()).map((b) => [b.digest, b.size]));
          for (const digest of new Set(blobsOf(record))) {
            if (stillUsed.has(digest) || !(await store.remove(digest))) continue;
            freed += sizes.get(digest) ?? 0;
            count++;
          }
        }
        process.stdout.write(`removed ${reference} (${count} blobs, ${humanBytes(freed)} freed)\n`);
      }
      if (missing.length > 0) throw new Error(`Cannot remove ${missing.join(", ")}: no such image in ${root}`);
    });
}

function normalise(reference: string): string {
  try {
    return formatReference(parseReference(reference, process.env.IMP_DEFAULT_REGISTRY));
  } catch {
    return reference;
  }
}
