import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it, after } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { findBinaries, isProcessAlive } from "../../../src/devcluster/index.ts";

const run = promisify(execFile);
const imp = fileURLToPath(new URL("../../../bin/imp.js", import.meta.url));
describe("imp dev cluster (detached) and imp crds install", () => {
  let parent = "";
  let dir = "";
  after(async () => {
    if (dir !== "") await run(process.execPath, [imp, "dev", "cluster", "down", "--dir", dir]).catch(() => undefined);
    if (parent !== "") await rm(parent, { recursive: true, force: true });
  });

  it("refuses a --dir that holds something else, and deletes nothing there", async () => {
    parent = await mkdtemp(join(tmpdir(), "imp-cli-"));
    const precious = join(parent, "precious.txt");
    await writeFile(precious, "keep me");
    const refused = await run(process.execPath, [imp, "dev", "cluster", "up", "--dir", parent]).catch((e: unknown) => e as { stderr: string; code: number });
    assert.ok("code" in refused && refused.code === 1);
    assert.match(refused.stderr, /not empty and holds no dev cluster state/);
    assert.equal(await readFile(precious, "utf8"), "keep me");
  });

  it("starts a cluster that outlives the command, installs the CRDs into it, and stops it completely", async () => {
    dir = join(parent, "cluster");
    const up = await run(process.execPath, [imp, "dev", "cluster", "up", "--dir", dir]);
    const kubeconfig = /export KUBECONFIG=(\S+)/.exec(up.stdout)?.[1];
    assert.ok(kubeconfig !== undefined, up.stdout);
    const state = JSON.parse(await readFile(join(dir, "state.json"), "utf8")) as { processes: Record<string, { pid: number; startTime: string }> };
    const pids = Object.values(state.processes).map((p) => p.pid);
    assert.equal(pids.length, 3);
    assert.ok(pids.every(isProcessAlive), "control plane died with the `up` command");

    const install = await run(process.execPath, [imp, "crds", "install", "--kubeconfig", kubeconfig]);
    assert.match(install.stdout, /impvms\.imp\.dev created/);
    const { kubectl } = await findBinaries();
    const crds = await run(kubectl, ["--kubeconfig", kubeconfig, "get", "crd", "-o", "name"]);
    assert.equal(crds.stdout.trim().split("\n").filter((l) => l.endsWith(".imp.dev")).length, 5);

    const again = await run(process.execPath, [imp, "dev", "cluster", "up", "--dir", dir]).catch((e: unknown) => e as { stderr: string; code: number });
    assert.ok("code" in again && again.code === 1, "a second `up` must refuse while one is running");
    assert.match(again.stderr, /one is running/);

    const down = await run(process.execPath, [imp, "dev", "cluster", "down", "--dir", dir]);
    assert.match(down.stdout, /stopped kube-controller-manager, kube-apiserver, etcd/);
    assert.ok(pids.every((pid) => !isProcessAlive(pid)), "a control-plane process survived `down`");
  });
});
