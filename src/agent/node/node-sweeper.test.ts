import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, mkdir, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createLogger, systemClock } from "../../shared/index.ts";
import { NodeSweeper } from "./node-sweeper.ts";

describe("NodeSweeper", () => {
  it("hands the network sweep the live set at the moment of asking: a live VM's tap stays, a dead one's goes", async (t) => {
    const vmsDir = await mkdtemp(join(tmpdir(), "imp-sweeper-"));
    t.after(() => rm(vmsDir, { recursive: true, force: true }));
    await mkdir(join(vmsDir, "uid-live"));
    await mkdir(join(vmsDir, "uid-gone"));
    const live = new Set(["uid-live"]);
    const taps = new Map([["imp-live", "uid-live"], ["imp-gone", "uid-gone"]]);
    const sweeper = new NodeSweeper({
      vmsDir,
      liveUids: () => live,
      // As NodeNetwork.sweep does: asks `has` for each port's owner.
      sweepNetwork: async (isLive) => {
        const removed = [...taps].filter(([, owner]) => !isLive.has(owner)).map(([tap]) => tap);
        for (const tap of removed) taps.delete(tap);
        return removed;
      },
      clock: systemClock,
      logger: createLogger({ level: "silent" }),
    });
    const result = await sweeper.sweepOnce();
    assert.equal(result.taps, 1);
    assert.deepEqual([...taps.keys()], ["imp-live"], "the live VM's tap is kept");
    assert.deepEqual(await readdir(vmsDir), ["uid-live"], "the dead VM's directory goes, the live one's stays");
  });
});
