import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { retryableError, terminalError } from "../../shared/index.ts";
import { isGuestMisbehaviour } from "./guest-connection.ts";
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
