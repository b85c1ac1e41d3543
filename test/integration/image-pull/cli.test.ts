// `imp image pull|ls|rm` as a person runs them (no Kubernetes), against a real docker-registry.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import { FsContentStore } from "../../../src/agent/image/pull/index.ts";
import { buildImage, buildLayer, busyboxLayer, type TestImage } from "../../harness/oci-image.ts";
import { pushImage, startRegistry, type RunningRegistry } from "../../harness/registry.ts";

const run = promisify(execFile);
const main = resolve(import.meta.dirname, "../../../src/cli/main.ts");
const amd64 = { os: "linux", architecture: "amd64" };

describe("imp image pull / ls / rm", () => {
  let open: RunningRegistry;
  let basic: RunningRegistry;
  let work: string;
  let storeRoot: string;
  let app: TestImage;
  let tool: TestImage;

  const imp = async (args: string[], env: Record<string, string> = {}): Promise<{ stdout: string; stderr: string }> =>
    run(process.execPath, [main, ...args], { env: { ...process.env, IMP_STORE: storeRoot, ...env } });

  before(async () => {
    work = await mkdtemp(join(tmpdir(), "imp-cli-"));
    storeRoot = join(work, "store");
    open = await startRegistry();
    const shared = await busyboxLayer("gzip");
    app = buildImage([shared, await buildLayer([{ path: "app", content: "app" }], "zstd")], { platform: amd64 });
    tool = buildImage([shared, await buildLayer([{ path: "tool", content: "tool" }], "gzip")], { platform: amd64 });
    await pushImage(open.url, "cli/app", "1", app);
    await pushImage(open.url, "cli/tool", "1", tool);
    basic = await startRegistry({ rootDir: open.rootDir, auth: { kind: "htpasswd", users: { ci: "pw" } } });
  });
  after(async () => {
    await Promise.all([open.stop(), basic.stop()]);
    await rm(work, { recursive: true, force: true });
  });

  it("pulls with a per-layer progress log and a summary", async () => {
    const { stdout, stderr } = await imp(["image", "pull", "--platform", "linux/amd64", `${open.host}/cli/app:1`]);
    assert.match(stdout, new RegExp(`^${open.host}/cli/app:1\\n  digest    ${app.manifest.digest}\\n  platform  linux/amd64\\n  layers    2 \\(`));
    for (const layer of app.layers) assert.match(stderr, new RegExp(`${layer.digest.slice(7, 19)}  pulled  `));
    const { stdout: again } = await imp(["image", "pull", "-q", "--platform", "linux/amd64", `${open.host}/cli/app:1`]);
    assert.equal(again, `${app.manifest.digest}\n`);
  });

  it("pulls with --auth-file from a private registry, and fails clearly without it", async () => {
    const authFile = join(work, "config.json");
    await writeFile(authFile, JSON.stringify({ auths: { [basic.host]: { auth: Buffer.from("ci:pw").toString("base64") } } }));
    const { stdout } = await imp(["image", "pull", "--store", storeRoot, "--auth-file", authFile, "--platform", "linux/amd64", `${basic.host}/cli/tool:1`], { IMP_STORE: "/nonexistent" });
    assert.match(stdout, new RegExp(tool.manifest.digest));
    const secretFile = join(work, "pull-secret.yaml");
    const dockerconfigjson = Buffer.from(JSON.stringify({ auths: { [basic.host]: { username: "ci", password: "pw" } } })).toString("base64");
    await writeFile(secretFile, `apiVersion: v1\nkind: Secret\ntype: kubernetes.io/dockerconfigjson\nmetadata:\n  name: pull\ndata:\n  .dockerconfigjson: ${dockerconfigjson}\n`);
    const fromSecret = await imp(["image", "pull", "-q", "--store", join(work, "store-secret"), "--auth-file", secretFile, "--platform", "linux/amd64", `${basic.host}/cli/tool:1`]);
    assert.equal(fromSecret.stdout, `${tool.manifest.digest}\n`);
    await assert.rejects(imp(["image", "pull", "--platform", "linux/amd64", `${basic.host}/cli/tool:1`]), (err: Error & { code?: number; stderr?: string }) => {
      assert.equal(err.code, 1);
      assert.match(err.stderr ?? "", /^imp: Cannot pull from 127\.0\.0\.1:\d+\/cli\/tool: the registry requires credentials and none are configured/);
      return true;
    });
  });

  it("lists pulled images with human sizes", async () => {
    const { stdout } = await imp(["image", "ls"]);
    const lines = stdout.trimEnd().split("\n");
    assert.match(lines[0] ?? "", /^REFERENCE\s+DIGEST\s+PLATFORM\s+LAYERS\s+SIZE\s+PULLED$/);
    assert.equal(lines.length, 3);
    assert.match(stdout, new RegExp(`${open.host}/cli/app:1\\s+${app.manifest.digest.slice(7, 19)}\\s+linux/amd64\\s+2\\s+\\d+(\\.\\d+)? (KiB|MiB)`));
    const json = JSON.parse((await imp(["image", "ls", "--json"])).stdout) as { reference: string }[];
    assert.deepEqual(json.map((r) => r.reference).sort(), [`${basic.host}/cli/tool:1`, `${open.host}/cli/app:1`].sort());
  });

  it("removes an image and only the blobs no other image uses", async () => {
    const { stdout } = await imp(["image", "rm", `${open.host}/cli/app:1`]);
    assert.match(stdout, /^removed .*cli\/app:1 \(3 blobs, .* freed\)\n$/, "manifest, config and the app layer; the shared layer stays");
    const store = await FsContentStore.open(storeRoot);
    assert.equal(await store.has(app.layers[0]?.digest ?? ""), true, "shared busybox layer kept for cli/tool");
    assert.equal(await store.has(app.layers[1]?.digest ?? ""), false);
    assert.equal(await store.has(app.manifest.digest), false);
    await assert.rejects(imp(["image", "rm", `${open.host}/cli/app:1`]), /no such image/);
    assert.doesNotMatch((await imp(["image", "ls"])).stdout, /cli\/app/);
  });
});
