import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { duplexPair } from "node:stream";
import { retryableError, terminalError } from "../../shared/index.ts";
import { encodeFrame, FrameDecoder } from "../guest/index.ts";
import type { RunningVm } from "../vmm/types.ts";
import { connectGuest, isGuestMisbehaviour, SERIAL_HELLO_FIRST_TRY_MS } from "./guest-connection.ts";
import { outcomeOfBootFailure } from "./outcome.ts";

describe("isGuestMisbehaviour()", () => {
  const violation = terminalError("GuestFrameTooLarge", "Cannot decode guest frame: declared length 4294967295 exceeds the limit of 1048576 bytes");
  const closed = retryableError("GuestChannelClosed", "Cannot complete guest request: the stream closed", { cause: violation });

  it("finds a protocol violation behind the closed stream a pending request saw", () => {
    assert.equal(isGuestMisbehaviour(closed), true);
    assert.equal(isGuestMisbehaviour(terminalError("GuestConsoleFlood", "x")), true);
  });

  it("does not blame the guest for a timeout, a plain close or a host-side error", () => {
    assert.equal(isGuestMisbehaviour(retryableError("GuestTimeout", "x")), false);
    assert.equal(isGuestMisbehaviour(retryableError("GuestChannelClosed", "x")), false);
    assert.equal(isGuestMisbehaviour(terminalError("GuestEventsOverflow", "x")), false);
    assert.equal(isGuestMisbehaviour(new Error("x")), false);
    assert.equal(isGuestMisbehaviour(undefined), false);
  });

  it("makes a boot that failed on a misbehaving guest GuestMisbehaved, with the violation in the message", () => {
    const outcome = outcomeOfBootFailure("guest", closed);
    assert.equal(outcome.reason, "GuestMisbehaved");
    assert.equal(outcome.succeeded, false);
    assert.match(outcome.message, /^guest: .*declared length 4294967295/);
    assert.equal(outcomeOfBootFailure("guest", terminalError("BootTimeout", "no hello")).reason, "BootTimeout");
  });
});

describe("connectGuest() over virtio-serial", () => {
  /** A VM whose guest drops the first hello (its port not open yet) and answers every later one after `latencyMs`. */
  function slowSerialVm(latencyMs: number): { vm: RunningVm; hellos: () => number } {
    const [hostEnd, guestEnd] = duplexPair();
    const decoder = new FrameDecoder();
    let hellos = 0;
    guestEnd.on("data", (chunk: Buffer) => {
      for (const body of decoder.push(chunk)) {
        const req = JSON.parse(body.toString("utf8")) as { type: string; id: number };
        if (++hellos === 1) continue;
        setTimeout(() => guestEnd.write(encodeFrame({ v: 1, type: req.type, id: req.id, versions: [1], agent: "imp-guest/test", capabilities: [] })), latencyMs);
      }
    });
    const vm = { downSignal: new AbortController().signal, connectGuest: () => Promise.resolve(hostEnd) } as unknown as RunningVm;
    return { vm, hellos: () => hellos };
  }

  it("asks again with longer waits until a guest slower than the first wait answers (an emulated guest on a loaded machine)", async () => {
    const latencyMs = 3 * SERIAL_HELLO_FIRST_TRY_MS; // longer than the first two waits, shorter than the third
    const { vm, hellos } = slowSerialVm(latencyMs);
    const started = performance.now();
    const client = await connectGuest(vm, { timeoutMs: 30_000, serial: true, clientName: "test" });
    const tookMs = performance.now() - started;
    assert.ok(hellos() >= 3, `hello sent ${hellos()} time(s)`);
    assert.ok(tookMs < 30_000, `answered in ${Math.round(tookMs)} ms`);
    client.close();
  });

  it("gives up with BootTimeout within the overall bound when no answer comes", async () => {
    const { vm } = slowSerialVm(60_000);
    const started = performance.now();
    await assert.rejects(connectGuest(vm, { timeoutMs: 2_000, serial: true, clientName: "test" }), (err: unknown) => err instanceof Error && /no hello within 2000 ms/.test(err.message));
    assert.ok(performance.now() - started < 10_000);
  });
});
