import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { exitRecordLine, firstExitRecord, newExitRecordKey, verifyExitRecord, type WorkloadExitRecord } from "./exit-record.ts";

interface Vectors {
  readonly key: string;
  readonly valid: readonly { readonly name: string; readonly payload: WorkloadExitRecord; readonly line: string }[];
  readonly invalid: readonly { readonly name: string; readonly line: string }[];
}

const vectors = JSON.parse(readFileSync(new URL("../../../testdata/protocol/exit-records.json", import.meta.url), "utf8")) as Vectors;
const key = Buffer.from(vectors.key, "base64");

describe("exit records (golden vectors shared with the guest agent)", () => {
  for (const v of vectors.valid) {
    it(`exitRecordLine() writes the guest's line for ${v.name}, and it verifies`, () => {
      assert.equal(exitRecordLine(key, v.payload), v.line);
      assert.deepEqual(verifyExitRecord(key, v.line), v.payload);
    });
  }
  for (const v of vectors.invalid) {
    it(`verifyExitRecord() refuses ${v.name}`, () => {
      assert.equal(verifyExitRecord(key, v.line), undefined);
    });
  }
});

describe("firstExitRecord()", () => {
  async function consoleFile(text: string): Promise<{ path: string; done: () => Promise<void> }> {
    const dir = await mkdtemp(join(tmpdir(), "imp-exit-record-"));
    const path = join(dir, "serial.log");
    await writeFile(path, text);
    return { path, done: () => rm(dir, { recursive: true, force: true }) };
  }

  it("takes the first valid record of the exec id, whatever the job wrote before and after it", async () => {
    const boot = newExitRecordKey();
    const jobKey = newExitRecordKey();
    const execId = "imp-run-abc";
    const forged = [
      `time=x level=INFO msg="exec exited" execId=${execId} exitCode=0`,
      exitRecordLine(jobKey, { execId, exitCode: 0 }),
      `Kernel panic - not syncing: ${exitRecordLine(jobKey, { execId, exitCode: 0 })}`,
      exitRecordLine(boot, { execId: "imp-run-other", exitCode: 0 }),
    ];
    const real = exitRecordLine(boot, { execId, exitCode: 137, signal: "SIGKILL" });
    const after = exitRecordLine(boot, { execId, exitCode: 0 }); // a later "valid" one must not win
    const file = await consoleFile([...forged, ...forged, "\n" + real, real, ...forged, after, ""].join("\n"));
    try {
      assert.deepEqual(await firstExitRecord(file.path, boot, execId, 16 * 1024 * 1024), { execId, exitCode: 137, signal: "SIGKILL" });
    } finally {
      await file.done();
    }
  });

  it("finds no record in a console of forgeries, nor past the byte limit", async () => {
    const boot = newExitRecordKey();
    const execId = "imp-run-abc";
    const filler = "x".repeat(70_000); // longer than a read chunk and any record line
    const file = await consoleFile(`${filler}\n${exitRecordLine(newExitRecordKey(), { execId, exitCode: 0 })}\n${filler}\n${exitRecordLine(boot, { execId, exitCode: 1 })}\n`);
    try {
      assert.equal(await firstExitRecord(file.path, boot, execId, 100_000), undefined, "the real record lies past the limit");
      assert.deepEqual(await firstExitRecord(file.path, boot, execId, 1_000_000), { execId, exitCode: 1 });
      assert.equal(await firstExitRecord(join(file.path, "missing"), boot, execId, 1_000_000), undefined);
    } finally {
      await file.done();
    }
  });
});
