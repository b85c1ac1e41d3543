import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import { describe, it } from "node:test";
import { retryableError, type ImpError } from "../../shared/index.ts";
import type { ExecOutcome, ExecReply, ExecRequest, GuestClient } from "../guest/index.ts";
import type { BootDeps, Connected, Prepared } from "./boot-steps.ts";
import { TEMPLATE_WARM_UP, warmUpSteps } from "./snapshot-steps.ts";

/**
 * A guest that answers the warm-up's Exec with `reply`, writes `output` for it (and for another
 * exec) right after, and reports its exit as `outcome`: an outcome, an error, or never (undefined).
 */
function guest(reply: Partial<ExecReply>, outcome?: ExecOutcome | Error, output: readonly string[] = []): { client: GuestClient; sent: ExecRequest[]; listeners: () => number } {
  const sent: ExecRequest[] = [];
  const events = new EventEmitter();
  const client = {
    on: (name: string, f: (e: unknown) => void) => events.on(name, f),
    off: (name: string, f: (e: unknown) => void) => events.off(name, f),
    exec: (request: ExecRequest) => {
      sent.push(request);
      for (const text of output) {
        events.emit("output", { execId: request.execId, stream: "stderr", data: Buffer.from(text).toString("base64") });
        events.emit("output", { execId: "another", stream: "stdout", data: Buffer.from("not the warm-up's").toString("base64") });
      }
      return Promise.resolve({ type: "exec", execId: request.execId, started: true, state: "running", ...reply });
    },
    waitForExit: (execId: string, options: { signal?: AbortSignal }) =>
      outcome === undefined
        ? new Promise((_resolve, reject) => options.signal?.addEventListener("abort", () => reject(new Error(`wait for ${execId} aborted`))))
        : outcome instanceof Error
          ? Promise.reject(outcome)
          : Promise.resolve(outcome),
  } as unknown as GuestClient;
  return { client, sent, listeners: () => events.listenerCount("output") };
}

const deps = { timeouts: { requestMs: 1_000 } } as unknown as BootDeps;
const logged: string[] = [];
const log = { info: (_o: unknown, msg: string) => void logged.push(msg) };
const run = (client: GuestClient, signal?: AbortSignal) =>
  warmUpSteps(deps).run({ request: { name: "tpl-1" }, client, log } as unknown as Prepared & Connected, signal === undefined ? {} : { signal });

describe("the template's warm-up step", () => {
  it("runs the image's warm-up as root with a plain PATH, to its exit, and reports how long it took", async () => {
    const g = guest({}, { execId: "imp-template-warm-up", state: "exited", exitCode: 0 });
    const { output } = await run(g.client);
    assert.equal(typeof output.warmUpMs, "number");
    assert.deepEqual(g.sent.map((r) => [r.argv, r.uid, Object.keys(r.env)]), [[[TEMPLATE_WARM_UP], undefined, ["PATH"]]]);
  });

  it("skips an image without one (the guest's own answer for that path, logged); the same words for another path fail", async () => {
    const g = guest({ state: "failed", started: false, error: `fork/exec ${TEMPLATE_WARM_UP}: no such file or directory` });
    const { output } = await run(g.client);
    assert.equal(output.warmUpMs, undefined);
    assert.ok(logged.some((m) => m.includes(`has no ${TEMPLATE_WARM_UP}`)), "the skip is logged");
    assert.equal(g.listeners(), 0, "its output listener is removed");
    await assert.rejects(run(guest({ state: "failed", started: false, error: "fork/exec /bin/bash: no such file or directory" }).client), (err: ImpError) => err.code === "TemplateWarmUpFailed");
  });

  it("fails the build on any other refusal, an exit other than 0, or a signal, with the last of the warm-up's own output", async () => {
    const cases: [Partial<ExecReply>, ExecOutcome | undefined, RegExp][] = [
      [{ state: "failed", started: false, error: "permission denied" }, undefined, /could not be started: permission denied/],
      [{}, { execId: "imp-template-warm-up", state: "exited", exitCode: 2 }, /ended with exit code 2/],
      [{}, { execId: "imp-template-warm-up", state: "exited", exitCode: 137, signal: "SIGKILL" }, /exit code 137 \(signal SIGKILL\)/],
    ];
    for (const [reply, outcome, message] of cases) {
      const g = guest(reply, outcome, ["x".repeat(5000), "imp-start-dockerd: dockerd did not answer within 60 s"]);
      await assert.rejects(run(g.client), (err: ImpError) => {
        assert.equal(err.code, "TemplateWarmUpFailed");
        assert.equal(err.errorClass, "terminal");
        assert.match(err.message, message);
        assert.match(err.message, /its last output: x+imp-start-dockerd: dockerd did not answer within 60 s$/);
        assert.ok(err.message.length < 4096 + 300, "only the tail of the output");
        assert.ok(!err.message.includes("not the warm-up's"), "another exec's output is not the warm-up's");
        return true;
      });
      assert.equal(g.listeners(), 0, "its output listener is removed");
    }
  });

  it("a build aborted during the warm-up ends with the abort's own reason, not as a warm-up timeout", async () => {
    const abort = new AbortController();
    const reason = new Error("the build's deadline");
    setTimeout(() => abort.abort(reason), 50);
    await assert.rejects(run(guest({}).client, abort.signal), (err: Error) => err === reason);
  });

  it("a guest that stops answering while it waits is reported as such, keeping its error's class", async () => {
    const closed = retryableError("GuestChannelClosed", "Cannot wait for exec imp-template-warm-up: the stream closed");
    await assert.rejects(run(guest({}, closed).client), (err: Error) => err === closed);
  });
});
