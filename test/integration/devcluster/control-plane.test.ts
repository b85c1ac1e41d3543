import { execFile, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { promisify } from "node:util";
import { fileURLToPath } from "node:url";
import { CoreV1Api } from "@kubernetes/client-node";
import { isProcessAlive, startControlPlane, type ControlPlane } from "../../../src/devcluster/index.ts";
import { waitFor } from "../../../src/shared/index.ts";

const run = promisify(execFile);

const portOpen = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    socket.once("connect", () => { socket.destroy(); resolve(true); });
    socket.once("error", () => resolve(false));
  });

describe("dev control plane", () => {
  let plane: ControlPlane;
  before(async () => {
    plane = await startControlPlane();
  });
  after(async () => {
    await plane.stop();
  });

  it("serves a kubeconfig that kubectl accepts", async () => {
    await plane.createNode("node-a", { "imp.dev/kvm": "false" });
    const { stdout } = await run(plane.binaries.kubectl, ["--kubeconfig", plane.kubeconfigPath, "get", "nodes", "-o", "name"]);
    assert.equal(stdout.trim(), "node/node-a");
  });

  it("serves a kubeconfig that @kubernetes/client-node accepts", async () => {
    const namespaces = await plane.kubeConfig.makeApiClient(CoreV1Api).listNamespace();
    assert.ok(namespaces.items.some((ns) => ns.metadata?.name === "kube-system"));
  });

  it("runs the garbage collector: a ConfigMap owned by a deleted ConfigMap disappears", async () => {
    const core = plane.kubeConfig.makeApiClient(CoreV1Api);
    const owner = await core.createNamespacedConfigMap({ namespace: "default", body: { metadata: { name: "owner" } } });
    await core.createNamespacedConfigMap({
      namespace: "default",
      body: {
        metadata: {
          name: "dependent",
          ownerReferences: [{ apiVersion: "v1", kind: "ConfigMap", name: "owner", uid: owner.metadata?.uid ?? "" }],
        },
      },
    });
    await core.deleteNamespacedConfigMap({ namespace: "default", name: "owner" });
    await waitFor(
      "garbage-collect the dependent ConfigMap",
      async () => {
        const list = await core.listNamespacedConfigMap({ namespace: "default" });
        return list.items.some((cm) => cm.metadata?.name === "dependent") ? undefined : true;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );
  });

  it("restarts the API server on the same port with the same data", async () => {
    const core = plane.kubeConfig.makeApiClient(CoreV1Api);
    await core.createNamespacedConfigMap({ namespace: "default", body: { metadata: { name: "survives-restart" } } });
    await plane.stopApiServer();
    await assert.rejects(core.listNamespacedConfigMap({ namespace: "default" }));
    await plane.startApiServer();
    const cm = await core.readNamespacedConfigMap({ namespace: "default", name: "survives-restart" });
    assert.equal(cm.metadata?.name, "survives-restart");
  });
});

describe("dev control plane teardown", () => {
  it("stop() leaves no process and no listening port behind", async () => {
    const plane = await startControlPlane();
    const pids = Object.values(plane.state().pids).filter((p): p is number => p !== undefined);
    const port = Number(new URL(plane.server).port);
    assert.equal(pids.length, 3);
    await plane.stop();
    for (const pid of pids) assert.equal(isProcessAlive(pid), false, `pid ${pid} still alive`);
    assert.equal(await portOpen(port), false);
  });

  it("a SIGKILLed owner takes its control plane with it", async (t) => {
    const script = fileURLToPath(new URL("./owner-process.fixture.ts", import.meta.url));
    const dir = await mkdtemp(join(tmpdir(), "imp-owner-"));
    t.after(() => rm(dir, { recursive: true, force: true }));
    const child = spawn(process.execPath, [script, dir], { stdio: ["ignore", "pipe", "inherit"] });
    const pids = await new Promise<number[]>((resolve, reject) => {
      let out = "";
      child.stdout.on("data", (chunk: Buffer) => {
        out += chunk.toString();
        const line = out.split("\n").find((l) => l.startsWith("PIDS "));
        if (line !== undefined) resolve(line.slice(5).split(",").map(Number));
      });
      child.once("exit", (code) => reject(new Error(`owner exited early with ${code}`)));
    });
    assert.equal(pids.length, 3);
    child.kill("SIGKILL");
    await waitFor("orphaned control plane to die", () => (pids.some(isProcessAlive) ? undefined : true), { timeoutMs: 15_000, intervalMs: 100 });
  });
});
