import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { connectLine, MAX_ACK_LINE_BYTES, parseAck } from "./handshake.ts";
import { ImpError } from "../../shared/index.ts";

describe("connectLine()", () => {
  it("writes CONNECT with the decimal port and a newline", () => {
    assert.equal(connectLine(10700).toString(), "CONNECT 10700\n");
  });
  it("rejects ports that are not u32", () => {
    for (const port of [-1, 1.5, 2 ** 32, Number.NaN]) assert.throws(() => connectLine(port), (err: unknown) => err instanceof ImpError && err.code === "VsockPortInvalid" && err.errorClass === "terminal");
  });
});

describe("parseAck()", () => {
  it("returns the host port and the bytes after the line when the ack is OK", () => {
    const ack = parseAck(Buffer.from("OK 1073741824\n\x00\x00\x00\x02{}"));
    assert.equal(ack.kind, "ok");
    assert.ok(ack.kind === "ok");
    assert.equal(ack.hostPort, 1073741824);
    assert.deepEqual([...ack.rest], [0, 0, 0, 2, 0x7b, 0x7d]);
  });
  it("waits for more bytes when the line is not complete", () => {
    assert.deepEqual(parseAck(Buffer.from("OK 10")), { kind: "incomplete" });
    assert.deepEqual(parseAck(Buffer.alloc(0)), { kind: "incomplete" });
  });
  it("rejects anything but OK <u32>", () => {
    for (const line of ["ok 1\n", "OK\n", "OK -1\n", "OK 1 2\n", "ERR 5\n", "OK 99999999999\n", "OK 4294967296\n", "\n"]) {
      assert.equal(parseAck(Buffer.from(line)).kind, "bad", line);
    }
  });
  it("gives up on a line longer than the bound even without a newline", () => {
    assert.equal(parseAck(Buffer.alloc(MAX_ACK_LINE_BYTES, 0x41)).kind, "bad");
    assert.equal(parseAck(Buffer.from(`OK ${"1".repeat(MAX_ACK_LINE_BYTES)}\n`)).kind, "bad");
  });
});
