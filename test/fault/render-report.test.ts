/**
 * docs/failure-proof.md rendering: the generated notice, every invariant per case with its time,
 * broken invariants listed at the top, malformed records refused, cells escaped; and the generator
 * script run on a results directory of two recorded cases.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { describe, it } from "node:test";
import { casePassed, GENERATED_NOTICE, parseCaseRecord, renderFailureProof } from "./render-report.ts";
import type { FaultCaseResult, InvariantOutcome } from "./report.ts";

const exec = promisify(execFile);
const repo = resolve(import.meta.dirname, "../..");

const allHeld = (ms: number): InvariantOutcome[] =>
  (["I1", "I2", "I3", "I4", "I5", "I6"] as const).map((id) => ({ id, held: true, detail: `${id} fine`, ...(id === "I1" || id === "I6" ? {} : { withinMs: ms }) }));

const good: FaultCaseResult = {
  id: "operator-crash-after-mint",
  suite: "test/fault/operator.test.ts",
  injected: "SIGKILL of imp operator",
  where: "setup.after-mint",
  impDid: "restarted operator: 409 for the name, stale runner removed, minted once more",
  invariants: allHeld(4_100),
  recoverMs: 6_200,
  passed: true,
  at: "2026-12-03T08:00:00.000Z",
};
const bad: FaultCaseResult = {
  ...good,
  id: "agent-crash-exec-sent",
  suite: "test/fault/agent.test.ts",
  where: "agent.exec-sent",
  impDid: "re-adopted | asked the guest",
  invariants: allHeld(900).map((o) => (o.id === "I5" ? { id: "I5", held: false, detail: "node-a tap uid-1: imp-0123 (no owner)" } : o)),
  recoverMs: 120_000,
  passed: false,
  at: "2026-12-03T08:05:00.000Z",
};

describe("renderFailureProof", () => {
  it("renders the notice, the invariants, a row per case with times, and the broken invariant at the top", () => {
    const md = renderFailureProof({ cases: [good, bad] });
    assert.ok(md.startsWith(GENERATED_NOTICE), "says it is generated");
    assert.match(md, /Never edit by hand/);
    assert.match(md, /2 case\(s\), 1 passed/);
    assert.match(md, /\| I3 \| Every GitHub registration made by Imp/);
    // Sorted by suite: agent.test.ts before operator.test.ts.
    assert.ok(md.indexOf("| **✗** agent-crash-exec-sent") < md.indexOf("| operator-crash-after-mint"));
    assert.match(md, /\| operator-crash-after-mint \| SIGKILL of imp operator \| setup\.after-mint \| .* \| ✓ \| ✓ 4\.1 s \| ✓ 4\.1 s \| ✓ 4\.1 s \| ✓ 4\.1 s \| ✓ \| 6\.2 s \|/);
    assert.match(md, /re-adopted \\\| asked the guest/, "a pipe in a cell is escaped");
    assert.match(md, /## Not holding\n\n- \*\*agent-crash-exec-sent\*\* I5: node-a tap uid-1/);
    assert.match(md, /\| ✓ 0\.9 s \| \*\*✗\*\* \| ✓ \| 120 s \|/);
    assert.match(md, /### operator-crash-after-mint[\s\S]*- I4 ✓ 4\.1 s: I4 fine/);
  });

  it("a case missing an invariant does not pass, and says so", () => {
    const partial = { ...good, id: "partial", invariants: good.invariants.filter((o) => o.id !== "I6") };
    assert.equal(casePassed(partial), false);
    const md = renderFailureProof({ cases: [partial] });
    assert.match(md, /- \*\*partial\*\* I6: not checked/);
    assert.match(md, /0 passed/);
  });

  it("an empty run says so; unreadable records are named", () => {
    const md = renderFailureProof({ cases: [], unreadable: ["half-written.json"] });
    assert.match(md, /No case was recorded/);
    assert.match(md, /`half-written.json`/);
  });

  it("parseCaseRecord refuses malformed records", () => {
    assert.deepEqual(parseCaseRecord(JSON.stringify(good)), good);
    assert.equal(parseCaseRecord("{"), undefined);
    assert.equal(parseCaseRecord(JSON.stringify({ ...good, passed: "yes" })), undefined);
    assert.equal(parseCaseRecord(JSON.stringify({ ...good, invariants: [{ id: "I9", held: true, detail: "" }] })), undefined);
  });

  it("scripts/gen-failure-proof.ts writes the page from a results directory and exits 1 on a failing case", async (t) => {
    const dir = await mkdtemp(join(tmpdir(), "imp-fault-results-"));
    t.after(() => rm(dir, { recursive: true, force: true }));
    await writeFile(join(dir, `${good.id}.json`), JSON.stringify(good));
    const out = join(dir, "failure-proof.md");
    const env = { ...process.env, IMP_FAULT_RESULTS_DIR: dir };
    const ok = await exec(process.execPath, [join(repo, "scripts/gen-failure-proof.ts"), "--out", out], { env });
    assert.match(ok.stdout, /1 case\(s\).*0 not passing/);
    assert.equal(await readFile(out, "utf8"), renderFailureProof({ cases: [good] }));
    await writeFile(join(dir, `${bad.id}.json`), JSON.stringify(bad));
    await assert.rejects(exec(process.execPath, [join(repo, "scripts/gen-failure-proof.ts"), "--out", out], { env }), (err: { code?: number }) => err.code === 1);
    assert.match(await readFile(out, "utf8"), /agent-crash-exec-sent/);
  });
});
