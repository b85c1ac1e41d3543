import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { ImpError } from "../../shared/index.ts";
import { encodeFrame, FrameDecoder, MAX_FRAME_BYTES, parseGuestFrame } from "./frame.ts";

const header = (n: number): Buffer => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n, 0);
  return b;
};

describe("encodeFrame()", () => {
  it("prefixes the JSON body with its big-endian length", () => {
    const frame = encodeFrame({ v: 1, type: "hello", id: 1, versions: [1], client: "imp-agent/0.1.0" });
    assert.equal(frame.readUInt32BE(0), 71);
    assert.equal(frame.subarray(0, 8).toString("hex"), "000000477b227622");
  });

  it("refuses a body over the limit", () => {
    assert.throws(() => encodeFrame({ s: "x".repeat(MAX_FRAME_BYTES) }), (err: unknown) => err instanceof ImpError && err.code === "GuestRequestTooLarge");
  });
});

describe("FrameDecoder", () => {
  it("reassembles frames split at every byte boundary", () => {
    const stream = Buffer.concat([encodeFrame({ a: 1 }), encodeFrame({ b: "é" }), header(0)]);
    const decoder = new FrameDecoder();
    const bodies: string[] = [];
    for (const byte of stream) bodies.push(...decoder.push(Buffer.from([byte])).map((b) => b.toString("utf8")));
    assert.deepEqual(bodies, ['{"a":1}', '{"b":"é"}', ""]);
    assert.equal(decoder.bufferedBytes, 0);
  });

  it("returns several frames from one chunk", () => {
    const decoder = new FrameDecoder();
    const bodies = decoder.push(Buffer.concat([encodeFrame({ a: 1 }), encodeFrame({ a: 2 }), header(10)]));
    assert.equal(bodies.length, 2);
    assert.equal(decoder.bufferedBytes, 4);
  });

  it("rejects a declared length over the limit and stays poisoned", () => {
    const decoder = new FrameDecoder();
    assert.throws(() => decoder.push(header(MAX_FRAME_BYTES + 1)), /exceeds the limit/);
    assert.throws(() => decoder.push(encodeFrame({ a: 1 })), /already sent an oversize frame/);
  });

  it("accepts a frame of exactly the maximum size", () => {
    const decoder = new FrameDecoder();
    const bodies = decoder.push(Buffer.concat([header(MAX_FRAME_BYTES), Buffer.alloc(MAX_FRAME_BYTES, 0x20)]));
    assert.equal(bodies[0]?.length, MAX_FRAME_BYTES);
  });
});

describe("parseGuestFrame()", () => {
  const ok = (value: unknown): Buffer => Buffer.from(JSON.stringify(value));
  const valid = [
    { v: 1, type: "hello", id: 1, versions: [1], agent: "imp-guest/0.1.0", capabilities: ["exec"] },
    { v: 1, type: "configure", id: 2 },
    { v: 1, type: "exec", id: 3, execId: "a", state: "running", started: true, pid: 9 },
    { v: 1, type: "exec.status", id: 4, execId: "a", state: "exited", exitCode: 137, signal: "SIGKILL", future: "ignored" },
    { v: 1, type: "signal", id: 5 },
    { v: 1, type: "shutdown", id: 6 },
    { v: 1, type: "error", id: 0, code: "bad_json", message: "x" },
    { v: 1, type: "output", id: 0, execId: "a", stream: "stderr", seq: 3, data: "aGkK" },
    { v: 1, type: "exit", id: 0, execId: "a", exitCode: 0 },
  ];
  for (const message of valid) {
    it(`accepts a valid ${message.type} message`, () => {
      assert.deepEqual(parseGuestFrame(ok(message)), message);
    });
  }

  const invalid: ReadonlyArray<readonly [string, unknown]> = [
    ["a non-object", [1]],
    ["an unknown type", { v: 1, type: "launch", id: 1 }],
    ["another version", { v: 2, type: "signal", id: 1 }],
    ["a reply with id 0", { v: 1, type: "signal", id: 0 }],
    ["an id over uint32", { v: 1, type: "signal", id: 2 ** 32 }],
    ["a fractional id", { v: 1, type: "signal", id: 1.5 }],
    ["an event with a non-zero id", { v: 1, type: "exit", id: 3, execId: "a", exitCode: 0 }],
    ["an exit code over 255", { v: 1, type: "exit", id: 0, execId: "a", exitCode: 256 }],
    ["a bad exec id", { v: 1, type: "exit", id: 0, execId: "../x", exitCode: 0 }],
    ["an unknown exec state", { v: 1, type: "exec", id: 1, execId: "a", state: "zombie", started: false }],
    ["output that is not base64", { v: 1, type: "output", id: 0, execId: "a", stream: "stdout", seq: 0, data: "!!!!" }],
    ["output over 32 KiB", { v: 1, type: "output", id: 0, execId: "a", stream: "stdout", seq: 0, data: "A".repeat(43_696) }],
    ["a third output stream", { v: 1, type: "output", id: 0, execId: "a", stream: "stdin", seq: 0, data: "aGkK" }],
    ["a negative seq", { v: 1, type: "output", id: 0, execId: "a", stream: "stdout", seq: -1, data: "aGkK" }],
    ["a huge error message", { v: 1, type: "error", id: 1, code: "internal", message: "x".repeat(5000) }],
    ["an error code with odd characters", { v: 1, type: "error", id: 1, code: "<script>", message: "" }],
    ["hello with too many capabilities", { v: 1, type: "hello", id: 1, versions: [1], agent: "a", capabilities: Array(65).fill("x") }],
  ];
  for (const [name, value] of invalid) {
    it(`rejects ${name}`, () => {
      assert.throws(() => parseGuestFrame(ok(value)), (err: unknown) => err instanceof ImpError && err.code === "GuestMessageInvalid");
    });
  }

  it("rejects invalid UTF-8 and non-JSON", () => {
    assert.throws(() => parseGuestFrame(Buffer.from([0x7b, 0xff, 0x7d])), /not UTF-8 JSON/);
    assert.throws(() => parseGuestFrame(Buffer.alloc(0)), /not UTF-8 JSON/);
  });
});

describe("the decode path on arbitrary bytes", () => {
  it("only ever yields valid messages or ImpErrors (seeded random input)", () => {
    let state = 0x1234_5678;
    const next = (): number => {
      state = (Math.imul(state, 1_103_515_245) + 12_345) >>> 0;
      return state >>> 16;
    };
    const fragments = ['{"v":1,', '"type":"exit",', '"id":0,', '"execId":"a",', '"exitCode":', "300", "0", "}", '"output"', '"data":"', "\u00ff", "[", "]", ","];
    for (let round = 0; round < 2000; round++) {
      const decoder = new FrameDecoder(4096);
      const parts: Buffer[] = [];
      for (let i = next() % 6; i >= 0; i--) {
        const body = Buffer.from(Array.from({ length: next() % 8 }, () => fragments[next() % fragments.length]).join(""));
        const header = Buffer.alloc(4);
        header.writeUInt32BE(next() % 50 === 0 ? 5000 + next() : body.length, 0);
        parts.push(header, body);
      }
      try {
        for (const body of decoder.push(Buffer.concat(parts))) {
          try {
            const message = parseGuestFrame(body);
            assert.ok(["output", "exit", "error", "hello", "configure", "exec", "exec.status", "signal", "shutdown"].includes(message.type));
          } catch (err) {
            assert.ok(err instanceof ImpError, String(err));
          }
        }
      } catch (err) {
        assert.ok(err instanceof ImpError && err.code === "GuestFrameTooLarge", String(err));
      }
    }
  });
});
