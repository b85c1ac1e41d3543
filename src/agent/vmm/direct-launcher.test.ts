import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ImpError } from "../../shared/index.ts";
import { DirectLauncher } from "./direct-launcher.ts";

const dir = realpathSync(mkdtempSync(join(tmpdir(), "imp-launch-")));
after(() => rmSync(dir, { recursive: true, force: true }));
const launcher = new DirectLauncher({ dieWithParent: true });
const files = (name: string): { stdoutPath: string; stderrPath: string } => ({ stdoutPath: join(dir, `${name}.out`), stderrPath: join(dir, `${name}.err`) });

describe("DirectLauncher", () => {
  it("writes stdout and stderr to the request's files, in the request's directory", async () => {
    const p = await launcher.launch({ name: "sh", binary: "/bin/sh", args: ["-c", "pwd; echo oops >&2; exit 3"], cwd: dir, ...files("a") });
    assert.ok(p.pid > 0);
    assert.deepEqual(await p.exited(), { code: 3, signal: null });
    assert.equal(p.running, false);
    assert.equal(readFileSync(join(dir, "a.out"), "utf8"), `${dir}\n`);
    assert.equal(readFileSync(join(dir, "a.err"), "utf8"), "oops\n");
    p.signal("SIGTERM"); // a no-op once exited
  });

  it("rejects with VmmSpawnFailed when the binary does not exist", async () => {
    await assert.rejects(launcher.launch({ name: "ghost", binary: join(dir, "ghost"), args: [], ...files("b") }), (err: unknown) => err instanceof ImpError && err.code === "VmmSpawnFailed" && err.errorClass === "terminal");
  });

  it("stops with SIGTERM, and with SIGKILL after the grace when SIGTERM is ignored", async () => {
    const polite = await launcher.launch({ name: "sleep", binary: "sleep", args: ["300"], ...files("c") });
    assert.equal(polite.running, true);
    assert.deepEqual(await polite.stop(5_000), { code: null, signal: "SIGTERM" });
    const stubborn = await launcher.launch({ name: "sh", binary: "/bin/sh", args: ["-c", "trap '' TERM; echo ready; while :; do sleep 1; done"], ...files("d") });
    // Wait until the trap is set, else SIGTERM could arrive before it and end the shell politely.
    for (let i = 0; i < 200 && readFileSync(join(dir, "d.out"), "utf8") === ""; i++) await new Promise((r) => setTimeout(r, 25));
    assert.deepEqual(await stubborn.stop(200), { code: null, signal: "SIGKILL" });
    assert.deepEqual(await stubborn.stop(200), { code: null, signal: "SIGKILL" });
  });
});
