/**
 * `npx imp` as a newcomer runs it after the set-up: quietly, on the project's own Node.js, whatever
 * Node.js the machine has; and a `node` too old for the sources is told what to do instead.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, it } from "node:test";

const root = resolve(import.meta.dirname, "../../..");
// npm as the README runs it: from the machine's PATH, not the pinned Node's bin directory first.
const machinePath = (process.env.PATH ?? "").split(":").filter((d) => !d.startsWith(join(root, "node_modules"))).join(":");
const systemNode = ["/usr/bin/node", "/usr/local/bin/node"].find((p) => existsSync(p));
const systemMajor = systemNode === undefined ? undefined : Number(spawnSync(systemNode, ["-p", "process.versions.node.split('.')[0]"], { encoding: "utf8" }).stdout.trim());

describe("npx imp", () => {
  it("prints its help on the project's Node.js with no npm warning", () => {
    const run = spawnSync("npx", ["imp", "--help"], { cwd: root, encoding: "utf8", env: { ...process.env, PATH: machinePath }, timeout: 120_000 });
    assert.equal(run.status, 0, run.stderr);
    assert.match(run.stdout, /^Usage: imp /m);
    assert.doesNotMatch(run.stderr, /npm warn|EBADENGINE/i, run.stderr);
  });

  it("tells a Node.js older than 24 how to start it, with imp run's failure code", { skip: systemMajor === undefined || systemMajor >= 24 ? `no Node.js older than 24 on this machine to try (${systemNode ?? "none"}: ${systemMajor ?? "-"})` : false }, () => {
    const run = spawnSync(systemNode ?? "node", [join(root, "bin/imp.js"), "--help"], { encoding: "utf8", timeout: 60_000 });
    assert.equal(run.status, 125);
    assert.match(run.stderr, /needs Node\.js 24 .*npx imp/);
  });
});
