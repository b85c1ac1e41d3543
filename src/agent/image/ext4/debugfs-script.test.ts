import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { debugfsErrors, debugfsScript } from "./debugfs-script.ts";

describe("debugfsScript()", () => {
  it("replaces a placeholder with a device node carrying mode, owner and times", () => {
    const script = debugfsScript(new Map([["dev/null", { kind: "char", major: 1, minor: 3, mode: 0o666, uid: 0, gid: 5, mtime: 1700000000.5 }]]), []);
    assert.equal(script, [
      'rm "dev/null"', 'cd "/dev"', 'mknod "null" c 1 3', "cd /",
      'sif "dev/null" mode 020666', 'sif "dev/null" uid 0', 'sif "dev/null" gid 5',
      'sif "dev/null" mtime @1700000000', 'sif "dev/null" atime @1700000000', 'sif "dev/null" ctime @1700000000', "",
    ].join("\n"));
  });

  it("makes FIFOs at the top level with mknod p", () => {
    const script = debugfsScript(new Map([["fifo", { kind: "fifo", major: 0, minor: 0, mode: 0o600, uid: 0, gid: 0, mtime: 0 }]]), []);
    assert.match(script, /^rm "fifo"\ncd "\/"\nmknod "fifo" p\n/);
    assert.match(script, /sif "fifo" mode 010600/);
  });

  it("sets xattrs from value files", () => {
    assert.equal(debugfsScript(new Map(), [{ path: "usr/bin/ping", name: "security.capability", valueFile: "/w/v0" }]), 'ea_set -f "/w/v0" "usr/bin/ping" "security.capability"\n');
  });

  it("restores the mtimes of directories that received nodes", () => {
    assert.equal(debugfsScript(new Map(), [], new Map([["dev", 1700000000.9], ["", 5]])), 'sif "/dev" mtime @1700000000\nsif "/" mtime @5\n');
  });

  it("is empty when there is nothing to fix", () => assert.equal(debugfsScript(new Map(), []), ""));

  for (const bad of ['a"b', "a\nrm x", "a\\b", "é"]) {
    it(`refuses the path ${JSON.stringify(bad)} that could escape its quotes`, () => {
      assert.throws(() => debugfsScript(new Map([[bad, { kind: "fifo", major: 0, minor: 0, mode: 0, uid: 0, gid: 0, mtime: 0 }]]), []), { code: "UnsafeDebugfsArgument" });
    });
  }
});

describe("debugfsErrors()", () => {
  it("ignores the banner and keeps error lines", () => {
    assert.deepEqual(debugfsErrors("debugfs 1.47.0 (5-Feb-2023)\n"), []);
    assert.deepEqual(debugfsErrors("debugfs 1.47.0 (5-Feb-2023)\nx: File not found by ext2_lookup \n"), ["x: File not found by ext2_lookup"]);
  });
});
