import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { backoffDelay, retry, type BackoffPolicy } from "./backoff.ts";
import { FakeClock } from "./clock.ts";
import { retryableError, terminalError } from "./errors.ts";

const policy: BackoffPolicy = { baseMs: 100, factor: 2, capMs: 1_000, jitter: 0, maxAttempts: 5 };

describe("backoffDelay()", () => {
  it("doubles from the base and stops at the cap", () => {
    assert.deepEqual([1, 2, 3, 4, 5, 6].map((a) => backoffDelay(policy, a)), [100, 200, 400, 800, 1_000, 1_000]);
  });
  it("stays within [d*(1-jitter), d] when jittered", () => {
    const jittered = { ...policy, jitter: 0.5 };
    assert.equal(backoffDelay(jittered, 3, () => 0), 400);
    assert.equal(backoffDelay(jittered, 3, () => 1), 200);
  });
});

describe("retry()", () => {
  it("retries retryable errors with the policy's delays, then returns the result", async () => {
    const clock = new FakeClock();
    const delays: number[] = [];
    let calls = 0;
    const result = retry(
      async () => {
        calls++;
        if (calls < 3) throw retryableError("Timeout", "Cannot do it: flaky");
        return "ok";
      },
      { policy, clock, onRetry: (_e, _a, d) => delays.push(d) },
    );
    await clock.advance(100);
    await clock.advance(200);
    assert.equal(await result, "ok");
    assert.equal(calls, 3);
    assert.deepEqual(delays, [100, 200]);
  });

  it("gives up after maxAttempts with the last error", async () => {
    const clock = new FakeClock();
    let calls = 0;
    const result = retry(
      async () => {
        calls++;
        throw retryableError("Timeout", `Cannot reach it: attempt ${calls}`);
      },
      { policy, clock },
    );
    const assertion = assert.rejects(result, /attempt 5/);
    for (let i = 0; i < 5; i++) await clock.advance(1_000);
    await assertion;
    assert.equal(calls, 5);
  });

  it("does not retry terminal errors", async () => {
    let calls = 0;
    await assert.rejects(
      retry(
        async () => {
          calls++;
          throw terminalError("Invalid", "Cannot parse it: bad input");
        },
        { policy, clock: new FakeClock() },
      ),
      /bad input/,
    );
    assert.equal(calls, 1);
  });

  it("stops waiting when its signal aborts", async () => {
    const controller = new AbortController();
    const result = retry(async () => { throw retryableError("Timeout", "Cannot reach it: down"); }, { policy, clock: new FakeClock(), signal: controller.signal });
    await new Promise((r) => setImmediate(r));
    controller.abort(new Error("stopped"));
    await assert.rejects(result, /stopped/);
  });
});
