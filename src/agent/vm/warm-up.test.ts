import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { ImpError } from "../../shared/index.ts";
import type { ExecOutcome, ExecReply, ExecRequest, GuestClient } from "../guest/index.ts";
import type { BootDeps, Connected, Prepared } from "./boot-steps.ts";
import { TEMPLATE_WARM_UP, warmUpSteps } from "./snapshot-steps.ts";

/** A guest that answers the warm-up's Exec with `reply` and its exit with `outcome` (or never, when undefined). */
function guest(reply: Partial<ExecReply>, outcome?: ExecOutcome): { client: GuestClient; sent: ExecRequest[] } {
  const sent: ExecRequest[] = [];
  const client = {
    exec: (request: ExecRequest) => {
      sent.push(request);
      return Promise.resolve({ type: "exec", execId: request.execId, started: true, state: "running", ...reply });
    },
    waitForExit: (execId: string, options: { signal?: AbortSignal }) =>
      outcome === undefined
        ? new Promise((_resolve, reject) => options.signal?.addEventListener("abort", () => reject(new Error(`wait for ${execId} aborted`))))
        : Promise.resolve(outcome),
  } as unknown as GuestClient;
  return { client, sent };
}

const deps = { timeouts: { requestMs: 1_000 } } as unknown as BootDeps;
const run = (client: GuestClient, signal?: AbortSignal) =>
  warmUpSteps(deps).run({ request: { name: "tpl-1" }, client } as unknown as Prepared & Connected, signal === undefined ? {} : { signal });

describe("the template's warm-up step", () => {
  it("runs the image's warm-up as root with a plain PATH, to its exit, and reports how long it took", async () => {
    const g = guest({}, { execId: "imp-template-warm-up", state: "exited", exitCode: 0 });
    const { output } = await run(g.client);
    assert.equal(typeof output.warmUpMs, "number");
    assert.deepEqual(g.sent.map((r) => [r.argv, r.uid, Object.keys(r.env)]), [[[TEMPLATE_WARM_UP], undefined, ["PATH"]]]);
  });

  it("skips an image without one: the guest's own answer for a missing program", async () => {
    const g = guest({ state: "failed", started: false, error: `fork/exec ${TEMPLATE_WARM_UP}: no such file or directory` });
    const { output } = await run(g.client);
    assert.equal(output.warmUpMs, undefined);
  });

  it("fails the build on any other refusal, an exit other than 0, or a signal", async () => {
    const cases: [Partial<ExecReply>, ExecOutcome | undefined, RegExp][] = [
      [{ state: "failed", started: false, error: "permission denied" }, undefined, /could not start .*permission denied/],
      [{}, { execId: "imp-template-warm-up", state: "exited", exitCode: 2 }, /ended with exit code 2/],
      [{}, { execId: "imp-template-warm-up", state: "exited", exitCode: 137, signal: "SIGKILL" }, /exit code 137 \(signal SIGKILL\)/],
    ];
    for (const [reply, outcome, message] of cases) {
      await assert.rejects(run(guest(reply, outcome).client), (err: ImpError) => {
        assert.equal(err.code, "TemplateWarmUpFailed");
        assert.equal(err.errorClass, "terminal");
        assert.match(err.message, message);
        return true;
      });
    }
  });

  it("ends a warm-up that never exits when the build is aborted, as the build's deadline does", async () => {
    const aborted = AbortSignal.timeout(50);
    await assert.rejects(run(guest({}).client, aborted), (err: ImpError) => err.code === "TemplateWarmUpFailed" && /did not exit/.test(err.message));
  });
});
