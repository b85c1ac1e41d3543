import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Pipeline } from "./pipeline.ts";

describe("Pipeline", () => {
  it("hands each step the products of the steps before it, in order", async () => {
    const seen: string[] = [];
    const p = Pipeline.of<{ readonly n: number }>()
      .step("double", (s) => ({ doubled: s.n * 2 }))
      .step("describe", (s) => ({ text: `${s.n}→${s.doubled}` }));
    const { output } = await p.run({ n: 21 }, { onStep: (name, e) => seen.push(`${e}:${name}`) });
    assert.equal(output.text, "21→42");
    assert.deepEqual(seen, ["begin:double", "end:double", "begin:describe", "end:describe"]);
    assert.deepEqual(p.names, ["double", "describe"]);
  });

  it("runs the cleanups registered so far in reverse when a step fails, and names the step", async () => {
    const undone: string[] = [];
    let failedAt = "";
    const p = Pipeline.of<object>()
      .step("a", (_s, ctx) => {
        ctx.onCleanup("undo a", () => void undone.push("a"));
        return { a: 1 };
      })
      .step("b", (_s, ctx) => {
        ctx.onCleanup("undo b", () => void undone.push("b"));
        return { b: 2 };
      })
      .step("c", () => {
        throw new Error("c broke");
      });
    await assert.rejects(p.run({}, { onFailure: (step) => (failedAt = step) }), /c broke/);
    assert.equal(failedAt, "c");
    assert.deepEqual(undone, ["b", "a"]);
  });

  it("composes with then(): one list of steps, one rollback", async () => {
    const undone: string[] = [];
    const front = Pipeline.of<{ readonly id: string }>().step("open", (s, ctx) => {
      ctx.onCleanup("close", () => void undone.push(`close ${s.id}`));
      return { handle: `h-${s.id}` };
    });
    const back = Pipeline.of<{ readonly handle: string }>().step("use", (s) => ({ used: `${s.handle}!` }));
    const whole = front.then(back);
    const { output, run } = await whole.run({ id: "x" });
    assert.equal(output.used, "h-x!");
    assert.deepEqual(whole.names, ["open", "use"]);
    await run.rollback();
    assert.deepEqual(undone, ["close x"]);
  });

  it("stops before the next step once aborted", async () => {
    const abort = new AbortController();
    let ran = false;
    const p = Pipeline.of<object>()
      .step("first", () => {
        abort.abort(new Error("stop"));
        return {};
      })
      .step("second", () => {
        ran = true;
        return {};
      });
    await assert.rejects(p.run({}, { signal: abort.signal }), /stop/);
    assert.equal(ran, false);
  });
});
