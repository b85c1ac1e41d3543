/**
 * Renders docs/failure-proof.md from the fault suite's last run: every `<case>.json` in the results
 * directory (IMP_FAULT_RESULTS_DIR, default .cache/fault-results; see test/fault/report.ts).
 * Usage: node scripts/gen-failure-proof.ts [--out PATH]. Exits 1 when a case did not pass, so CI
 * that regenerates the page also fails on a broken invariant.
 */
import { readdir, readFile, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { RESULTS_DIR } from "../test/fault/report.ts";
import { casePassed, parseCaseRecord, renderFailureProof } from "../test/fault/render-report.ts";
import type { FaultCaseResult } from "../test/fault/report.ts";

const outFlag = process.argv.indexOf("--out");
const out = resolve(outFlag >= 0 ? (process.argv[outFlag + 1] ?? "") : join(import.meta.dirname, "../docs/failure-proof.md"));

const files = (await readdir(RESULTS_DIR).catch(() => [] as string[])).filter((f) => f.endsWith(".json")).sort();
const cases: FaultCaseResult[] = [];
const unreadable: string[] = [];
for (const file of files) {
  const parsed = parseCaseRecord(await readFile(join(RESULTS_DIR, file), "utf8"));
  if (parsed === undefined) unreadable.push(file);
  else cases.push(parsed);
}
await writeFile(out, renderFailureProof({ cases, unreadable }));
const failed = cases.filter((c) => !casePassed(c));
console.log(`wrote ${out}: ${cases.length} case(s) from ${RESULTS_DIR}, ${failed.length} not passing${unreadable.length > 0 ? `, ${unreadable.length} unreadable` : ""}`);
if (failed.length > 0 || unreadable.length > 0) process.exitCode = 1;
