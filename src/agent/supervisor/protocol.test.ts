import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { encodeRequest, LineDecoder, MAX_LINE, parseMessage } from "./protocol.ts";

const status = { name: "qemu", vmId: "vm-1", state: "running", process: { pid: 11, startTime: 6 }, supervisor: { pid: 10, startTime: 5 }, startedAt: "t" };

describe("parseMessage", () => {
  it("reads hello, exit and replies", () => {
    assert.deepEqual(parseMessage(JSON.stringify({ type: "hello", status })), { type: "hello", status });
    const exited = { ...status, state: "exited", exit: { code: null, signal: "SIGKILL", at: "t2" } };
    assert.deepEqual(parseMessage(JSON.stringify({ type: "exit", status: exited })), { type: "exit", status: exited });
    assert.deepEqual(parseMessage(JSON.stringify({ type: "reply", id: 3, ok: false, error: "unknown op" })), { type: "reply", id: 3, ok: false, error: "unknown op" });
  });
  it("refuses an exit event without an exit, a running status with one, and non-messages", () => {
    assert.equal(parseMessage(JSON.stringify({ type: "exit", status })), undefined);
    assert.equal(parseMessage(JSON.stringify({ type: "hello", status: { ...status, exit: { code: 0, signal: null, at: "t" } } })), undefined);
    assert.equal(parseMessage("not json"), undefined);
    assert.equal(parseMessage(JSON.stringify({ type: "reply" })), undefined);
    assert.equal(parseMessage(JSON.stringify({ type: "other", status })), undefined);
  });
  it("encodes one request per line", () => {
    assert.equal(encodeRequest({ id: 1, op: "signal", signal: "SIGTERM" }), '{"id":1,"op":"signal","signal":"SIGTERM"}\n');
  });
});

describe("LineDecoder", () => {
  it("joins chunks into lines", () => {
    const d = new LineDecoder();
    assert.deepEqual(d.push('{"a"'), []);
    assert.deepEqual(d.push(':1}\n{"b":2}\n{"c'), ['{"a":1}', '{"b":2}']);
    assert.deepEqual(d.push('":3}\n'), ['{"c":3}']);
  });
  it("refuses a line at the bound, complete or not", () => {
    assert.throws(() => new LineDecoder().push("x".repeat(MAX_LINE)));
    assert.throws(() => new LineDecoder().push(`${"x".repeat(MAX_LINE)}\n`));
    assert.deepEqual(new LineDecoder().push(`${"x".repeat(MAX_LINE - 1)}\n`).length, 1);
  });
});
