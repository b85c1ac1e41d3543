import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { parseExit, parseExitRecord, parseIdentity } from "./records.ts";

const identity = {
  version: 1, name: "qemu", vmId: "vm-1", bootId: "b", supervisor: { pid: 10, startTime: 5 }, process: { pid: 11, startTime: 6 },
  socket: "/run/imp/vm-1/supervised/qemu/sock", cgroupMode: "v1-memory", cgroup: "/sys/fs/cgroup/memory/imp/vm-1/qemu", startedAt: "2026-01-01T00:00:00Z",
};

describe("parseIdentity", () => {
  it("accepts what the supervisor writes", () => {
    assert.deepEqual(parseIdentity(identity), identity);
  });
  it("refuses a record without a start time, with pid 0, or of another version", () => {
    assert.equal(parseIdentity({ ...identity, supervisor: { pid: 10 } }), undefined);
    assert.equal(parseIdentity({ ...identity, process: { pid: 0, startTime: 1 } }), undefined);
    assert.equal(parseIdentity({ ...identity, version: 2 }), undefined);
    assert.equal(parseIdentity([identity]), undefined);
  });
});

describe("parseExit", () => {
  it("takes exactly one of code and signal", () => {
    assert.deepEqual(parseExit({ code: 0, signal: null, at: "t" }), { code: 0, signal: null, at: "t" });
    assert.deepEqual(parseExit({ code: null, signal: "SIGKILL", at: "t" }), { code: null, signal: "SIGKILL", at: "t" });
    assert.equal(parseExit({ code: null, signal: null, at: "t" }), undefined);
    assert.equal(parseExit({ code: 1, signal: "SIGKILL", at: "t" }), undefined);
    assert.equal(parseExit({ code: 1.5, signal: null, at: "t" }), undefined);
    assert.equal(parseExit({ code: null, signal: "kill -9", at: "t" }), undefined);
    assert.equal(parseExit({ code: 1, signal: null }), undefined);
  });
  it("exit.json names the process it is for", () => {
    const rec = { code: 3, signal: null, at: "t", name: "qemu", vmId: "vm-1", bootId: "b", process: { pid: 11, startTime: 6 } };
    assert.deepEqual(parseExitRecord(rec), rec);
    assert.equal(parseExitRecord({ ...rec, process: undefined }), undefined);
  });
});
