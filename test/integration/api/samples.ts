/** The YAML samples in deploy/samples, loaded as plain objects (they double as valid base objects for tests). */
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { parse } from "yaml";
import type { AnyImpObject } from "./imp-client.ts";

export const SAMPLES_DIR = join(import.meta.dirname, "../../../deploy/samples");

/** File name → object, in directory order. */
export function loadSamples(): Map<string, AnyImpObject> {
  const files = readdirSync(SAMPLES_DIR).filter((f) => f.endsWith(".yaml")).sort();
  return new Map(files.map((f) => [f, parse(readFileSync(join(SAMPLES_DIR, f), "utf8")) as AnyImpObject]));
}

/** One sample by file name; throws when missing so a renamed sample fails loudly. */
export function sample(name: string): AnyImpObject {
  const found = loadSamples().get(name);
  if (found === undefined) throw new Error(`Cannot load sample ${name}: not in ${SAMPLES_DIR}`);
  return structuredClone(found);
}
