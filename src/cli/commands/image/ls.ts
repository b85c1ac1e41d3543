/** `imp image ls`: the images recorded in the content store. */
import type { Command } from "commander";
import { formatPlatform, ImageRefs } from "../../../agent/index.ts";
import { humanBytes, shortDigest, storeDir, table, withStoreOption } from "./common.ts";

export function registerImageLs(image: Command): void {
  withStoreOption(image.command("ls"))
    .alias("list")
    .description("list pulled images")
    .option("--json", "print the records as JSON")
    .action(async (opts: { store?: string; json?: boolean }) => {
      const records = await new ImageRefs(storeDir(opts)).list();
      if (opts.json === true) {
        process.stdout.write(`${JSON.stringify(records, null, 2)}\n`);
        return;
      }
      const rows = records.map((r) => [
        r.reference,
        shortDigest(r.manifestDigest),
        formatPlatform(r.platform),
        String(r.layers.length),
        humanBytes(r.layers.reduce((sum, l) => sum + l.size, 0)),
        r.pulledAt.replace(/\.\d+Z$/, "Z"),
      ]);
      process.stdout.write(table([["REFERENCE", "DIGEST", "PLATFORM", "LAYERS", "SIZE", "PULLED"], ...rows]));
    });
}
