import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { promisify } from "node:util";
import { IMP_NODE_FLAGS, IMP_SHEBANG } from "./node-flags.ts";

const bin = resolve(import.meta.dirname, "../../bin/imp.js");

describe("the imp entry's node flags", () => {
  it("bin/imp.js starts node with IMP_NODE_FLAGS", () => {
    assert.equal(readFileSync(bin, "utf8").split("\n")[0], IMP_SHEBANG);
    for (const flag of ["--max-semi-space-size=4", "--optimize-for-size"]) assert.ok(IMP_NODE_FLAGS.includes(flag), flag);
  });

  it("runs as an executable through env -S, and node accepts the flags", async () => {
    // The project's node first on PATH, as npm scripts and an installed `imp` have it.
    const env = { ...process.env, PATH: `${dirname(process.execPath)}:${process.env["PATH"] ?? ""}` };
    const { stdout } = await promisify(execFile)(bin, ["--help"], { env, timeout: 60_000 });
    assert.match(stdout, /Usage: imp/);
  });
});
