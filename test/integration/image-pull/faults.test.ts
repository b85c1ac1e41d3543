// Failure behaviour of pulls against a real docker-registry, with faults injected by a loopback proxy
// in front of it: corrupted blobs, aborted and killed pulls, 503/429 with Retry-After, stalled
// streams, the concurrency bound, and blob redirects to a storage origin.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, readdir, rm, stat } from "node:fs/promises";
import { request as httpRequest } from "node:http";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before, describe, it } from "node:test";
import type { PullProgress } from "../../../src/agent/image/pull/index.ts";
import { credentialsFromDockerConfig, FsContentStore, ImagePuller, pullImage } from "../../../src/agent/image/pull/index.ts";
import { buildImage, buildLayer, busyboxLayer, randomLayer } from "../../harness/oci-image.ts";
import { corruptRegistryBlob, pushImage, startFaultProxy, startRegistry, type RunningRegistry } from "../../harness/registry.ts";

const amd64 = { os: "linux", architecture: "amd64" };
const fast = { baseMs: 10, factor: 2, capMs: 100, jitter: 0, maxAttempts: 5 };

describe("pull failures against a real registry", () => {
  let registry: RunningRegistry;
  let work: string;

  before(async () => {
    work = await mkdtemp(join(tmpdir(), "imp-faults-"));
    registry = await startRegistry();
  });
  after(async () => {
    await registry.stop();
    await rm(work, { recursive: true, force: true });
  });

  const store = (name: string): Promise<FsContentStore> => FsContentStore.open(join(work, name));

  it("a corrupted blob fails with a digest mismatch and leaves no blob in the store", async () => {
    const bad = await randomLayer(64 * 1024, "none");
    const image = buildImage([await busyboxLayer("gzip"), bad], { platform: amd64 });
    await pushImage(registry.url, "faults/corrupt", "1", image);
    await corruptRegistryBlob(registry.rootDir, bad.digest);
    const s = await store("corrupt");
    await assert.rejects(pullImage(`${registry.host}/faults/corrupt:1`, { store: s, platform: amd64, retryPolicy: fast }), (err: Error & { code?: string; errorClass?: string }) => {
      assert.equal(err.code, "DigestMismatch");
      assert.equal(err.errorClass, "terminal");
      assert.match(err.message, new RegExp(`Cannot store blob ${bad.digest}: its content hashes to sha256:`));
      return true;
    });
    assert.equal(await s.has(bad.digest), false);
    assert.deepEqual(await s.tempFiles(), []);
  });

  it("aborting mid-layer leaves nothing that looks complete", async () => {
    const big = await randomLayer(8 * 1024 * 1024, "none");
    await pushImage(registry.url, "faults/abort", "1", buildImage([big], { platform: amd64 }));
    const s = await store("abort");
    const controller = new AbortController();
    let receivedAtAbort = 0;
    const onProgress = (e: PullProgress): void => {
      if (e.kind === "layer-bytes" && e.received > 0 && !controller.signal.aborted) {
        receivedAtAbort = e.received;
        controller.abort(new Error("operator cancelled"));
      }
    };
    await assert.rejects(pullImage(`${registry.host}/faults/abort:1`, { store: s, platform: amd64, signal: controller.signal, onProgress }), /operator cancelled/);
    assert.ok(receivedAtAbort > 0 && receivedAtAbort < big.size, `aborted mid-layer (at ${receivedAtAbort} of ${big.size})`);
    assert.equal(await s.has(big.digest), false);
    assert.deepEqual(await s.tempFiles(), []);
    assert.deepEqual((await s.list()).map((b) => b.digest).includes(big.digest), false);
  });

  it("a pull killed with SIGKILL mid-layer leaves only a temp file, which the next open removes", async () => {
    const big = await randomLayer(4 * 1024 * 1024, "none");
    await pushImage(registry.url, "faults/kill", "1", buildImage([big], { platform: amd64 }));
    const proxy = await startFaultProxy(registry.url, (req) => (req.url?.includes(big.digest) === true ? { kind: "stall-after", bytes: 2.5 * 1024 * 1024 } : undefined));
    const root = join(work, "kill");
    const entry = resolve(import.meta.dirname, "../../../src/agent/image/pull/index.ts");
    const script = `const m = await import(${JSON.stringify(entry)}); const store = await m.FsContentStore.open(${JSON.stringify(root)});
      await m.pullImage(${JSON.stringify(`${proxy.host}/faults/kill:1`)}, { store, platform: { os: "linux", architecture: "amd64" } });`;
    const child = spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: "ignore" });
    try {
      const blobDir = join(root, "blobs", "sha256");
      const deadline = Date.now() + 30_000;
      for (;;) {
        const temps = await readdir(blobDir).then((names) => names.filter((n) => n.startsWith(".tmp-")), () => []);
        const sizes = await Promise.all(temps.map((t) => stat(join(blobDir, t)).then((st) => st.size, () => 0)));
        if (sizes.some((size) => size >= 1024 * 1024)) break;
        assert.ok(Date.now() < deadline, "the child started writing the layer");
        await new Promise((r) => setTimeout(r, 20));
      }
      child.kill("SIGKILL");
      await new Promise((r) => child.once("exit", r));
      const leftovers = await readdir(blobDir);
      assert.ok(!leftovers.includes(big.digest.slice(7)), "no blob file under the layer's name");
      assert.ok(leftovers.some((n) => n.startsWith(".tmp-")), "the partial download is only a temp file");
      const reopened = await FsContentStore.open(root);
      assert.equal(await reopened.has(big.digest), false);
      assert.deepEqual(await reopened.tempFiles(), [], "open removed the dead writer's temp file");
    } finally {
      if (child.exitCode === null) child.kill("SIGKILL");
      await proxy.stop();
    }
  });

  it("retries 503 and 429 answers, honouring Retry-After up to the cap, then succeeds", async () => {
    const layer = await buildLayer([{ path: "retry", content: "retry me" }], "gzip");
    const image = buildImage([layer], { platform: amd64 });
    await pushImage(registry.url, "faults/retry", "1", image);
    const proxy = await startFaultProxy(registry.url, (req, seen) => {
      if (req.url?.includes(`/blobs/${layer.digest}`) === true && seen < 2) return { kind: "respond", status: 503, headers: { "retry-after": "3600" } };
      if (req.url?.includes("/manifests/1") === true && seen < 1) return { kind: "respond", status: 429, headers: { "retry-after": "0" } };
      return undefined;
    });
    try {
      const retries: PullProgress[] = [];
      const pulled = await pullImage(`${proxy.host}/faults/retry:1`, {
        store: await store("retry"),
        platform: amd64,
        retryPolicy: fast,
        retryAfterCapMs: 50,
        onProgress: (e) => { if (e.kind === "retry") retries.push(e); },
      });
      assert.equal(pulled.manifestDigest, image.manifest.digest);
      assert.deepEqual(retries.map((r) => r.kind === "retry" && r.delayMs), [0, 50, 50], "Retry-After 0 honoured, 3600 s cut to the cap");
      assert.equal(proxy.stats.requests.filter((r) => r.includes(`/blobs/${layer.digest}`)).length, 3);
    } finally {
      await proxy.stop();
    }
  });

  it("does not retry a 404 for a blob (terminal)", async () => {
    const layer = await buildLayer([{ path: "gone", content: "gone" }], "gzip");
    await pushImage(registry.url, "faults/gone", "1", buildImage([layer], { platform: amd64 }));
    const proxy = await startFaultProxy(registry.url, (req) =>
      req.url?.includes(`/blobs/${layer.digest}`) === true ? { kind: "respond", status: 404, body: JSON.stringify({ errors: [{ code: "BLOB_UNKNOWN", message: "blob unknown to registry" }] }) } : undefined);
    try {
      await assert.rejects(pullImage(`${proxy.host}/faults/gone:1`, { store: await store("gone"), platform: amd64, retryPolicy: fast }), /registry answered 404 \(BLOB_UNKNOWN: blob unknown to registry\)/);
      assert.equal(proxy.stats.requests.filter((r) => r.includes(`/blobs/${layer.digest}`)).length, 1);
    } finally {
      await proxy.stop();
    }
  });

  it("a stream that stalls is abandoned after the idle timeout and resumed with a Range request", async () => {
    const layer = await randomLayer(512 * 1024, "none");
    const image = buildImage([layer], { platform: amd64 });
    await pushImage(registry.url, "faults/stall", "1", image);
    const proxy = await startFaultProxy(registry.url, (req, seen) =>
      req.url?.includes(`/blobs/${layer.digest}`) === true && seen === 0 ? { kind: "stall-after", bytes: 100_000 } : undefined);
    try {
      const s = await store("stall");
      await pullImage(`${proxy.host}/faults/stall:1`, { store: s, platform: amd64, retryPolicy: fast, idleTimeoutMs: 1500 });
      assert.deepEqual(await s.readBytes(layer.digest, 1 << 20), layer.bytes);
      assert.equal(proxy.stats.requests.filter((r) => r.includes(`/blobs/${layer.digest}`)).length, 2);
      assert.deepEqual(proxy.stats.ranges.slice(-2), [undefined, "bytes=100000-"], "the second request asks only for the rest");
    } finally {
      await proxy.stop();
    }
  });

  it("starts over when the server ignores the Range request, and still verifies the whole blob", async () => {
    const layer = await randomLayer(512 * 1024, "none");
    await pushImage(registry.url, "faults/norange", "1", buildImage([layer], { platform: amd64 }));
    const proxy = await startFaultProxy(registry.url, (req, seen) => {
      if (req.url?.includes(`/blobs/${layer.digest}`) !== true) return undefined;
      return seen === 0 ? { kind: "stall-after", bytes: 200_000 } : { kind: "strip-range" };
    });
    try {
      const s = await store("norange");
      await pullImage(`${proxy.host}/faults/norange:1`, { store: s, platform: amd64, retryPolicy: fast, idleTimeoutMs: 1500 });
      // Appending the full body after the first 200000 bytes would overflow the size; the blob verifies,
      // so the writer started over.
      assert.deepEqual(await s.readBytes(layer.digest, 1 << 20), layer.bytes);
      assert.deepEqual(proxy.stats.ranges.slice(-2), [undefined, "bytes=200000-"]);
    } finally {
      await proxy.stop();
    }
  });

  it("refuses oversized and tampered manifests from a registry (untrusted input)", async () => {
    const layer = await buildLayer([{ path: "m", content: "m" }], "gzip");
    const image = buildImage([layer], { platform: amd64 });
    const other = buildImage([await buildLayer([{ path: "n", content: "n" }], "gzip")], { platform: amd64 });
    await pushImage(registry.url, "faults/manifest", "1", image);
    const proxy = await startFaultProxy(registry.url, (req) => {
      if (req.url?.endsWith("/manifests/huge") === true) return { kind: "respond", status: 200, headers: { "content-type": image.manifest.mediaType }, body: " ".repeat(5 * 1024 * 1024) };
      if (req.url?.endsWith(`/manifests/${image.manifest.digest}`) === true || req.url?.endsWith("/manifests/swapped") === true) {
        return { kind: "respond", status: 200, headers: { "content-type": other.manifest.mediaType, "docker-content-digest": image.manifest.digest }, body: other.manifest.bytes.toString() };
      }
      return undefined;
    });
    try {
      const s = await store("manifests");
      await assert.rejects(pullImage(`${proxy.host}/faults/manifest:huge`, { store: s, platform: amd64 }), { code: "ResponseTooLarge", message: /more than the limit of 4194304/ });
      await assert.rejects(pullImage(`${proxy.host}/faults/manifest@${image.manifest.digest}`, { store: s, platform: amd64 }), {
        code: "DigestMismatch",
        message: new RegExp(`hashes to ${other.manifest.digest}, not ${image.manifest.digest}`),
      });
      await assert.rejects(pullImage(`${proxy.host}/faults/manifest:swapped`, { store: s, platform: amd64 }), { code: "DigestMismatch" });
      assert.deepEqual(await s.list(), [], "nothing was stored");
    } finally {
      await proxy.stop();
    }
  });

  it("fetches layers concurrently but never more than the bound", async () => {
    const layers = await Promise.all([1, 2, 3, 4, 5, 6].map((i) => buildLayer([{ path: `layer-${i}`, content: `layer ${i}\n` }], i % 2 === 0 ? "zstd" : "gzip")));
    await pushImage(registry.url, "faults/wide", "1", buildImage(layers, { platform: amd64 }));
    for (const bound of [2, 4]) {
      const proxy = await startFaultProxy(registry.url, (req) => (req.url?.includes("/blobs/") === true ? { kind: "delay", ms: 400 } : undefined));
      try {
        await pullImage(`${proxy.host}/faults/wide:1`, { store: await store(`wide-${bound}`), platform: amd64, concurrency: bound });
        assert.equal(proxy.stats.maxInFlightBlobs, bound, `at most ${bound} blob downloads at once, and the pool used them all`);
        assert.equal(proxy.stats.blobGets, 7, "config + 6 layers");
      } finally {
        await proxy.stop();
      }
    }
  });

  it("follows blob redirects to another origin without leaking the registry credentials there", async () => {
    const basic = await startRegistry({ rootDir: registry.rootDir, auth: { kind: "htpasswd", users: { ci: "pw" } } });
    const layer = await buildLayer([{ path: "redirected", content: "via storage" }], "gzip");
    const image = buildImage([layer], { platform: amd64 });
    await pushImage(registry.url, "faults/redirect", "1", image);
    const storageSaw: (string | undefined)[] = [];
    let proxyPort = 0;
    const proxy = await startFaultProxy(
      basic.url,
      (req) => {
        const m = /\/blobs\/(sha256:[0-9a-f]{64})$/.exec(req.url ?? "");
        return m !== null && req.method === "GET" ? { kind: "redirect", location: `http://localhost:${proxyPort}/storage/${m[1]}?X-Signature=abc` } : undefined;
      },
      (req, res) => {
        if (req.url?.startsWith("/storage/") !== true) return false;
        storageSaw.push(req.headers.authorization);
        const digest = req.url.slice("/storage/".length).split("?")[0] ?? "";
        // Storage serves the bytes itself (here: read from the registry with the proxy's own access).
        const upstream = httpRequest(`${registry.url}/v2/faults/redirect/blobs/${digest}`, (up) => {
          res.writeHead(up.statusCode ?? 502, { "content-length": up.headers["content-length"] ?? "" });
          up.pipe(res);
        });
        upstream.end();
        return true;
      },
    );
    proxyPort = Number(proxy.host.split(":")[1]);
    try {
      const auth = credentialsFromDockerConfig(JSON.stringify({ auths: { [proxy.host]: { username: "ci", password: "pw" } } }));
      const s = await store("redirect");
      const pulled = await new ImagePuller({ credentials: auth }).pull(`${proxy.host}/faults/redirect:1`, { store: s, platform: amd64 });
      assert.equal(pulled.manifestDigest, image.manifest.digest);
      assert.equal(await s.has(layer.digest), true);
      assert.equal(storageSaw.length, 2, "config and layer came from storage");
      assert.deepEqual(storageSaw, [undefined, undefined], "no Authorization header sent to the storage origin");
    } finally {
      await proxy.stop();
      await basic.stop();
    }
  });
});
