import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { MediaTypes, parseManifestDocument } from "./media-types.ts";

const d = (c: string, mediaType: string = MediaTypes.ociLayerGzip): { mediaType: string; digest: string; size: number } => ({ mediaType, digest: `sha256:${c.repeat(64)}`, size: 10 });
const bytes = (doc: unknown): Uint8Array => Buffer.from(JSON.stringify(doc));
const manifest = (over: Record<string, unknown> = {}): Uint8Array =>
  bytes({ schemaVersion: 2, mediaType: MediaTypes.ociManifest, config: d("c", MediaTypes.ociConfig), layers: [d("a"), d("b", MediaTypes.ociLayerZstd)], ...over });

describe("parseManifestDocument", () => {
  it("parses an OCI image manifest", () => {
    const doc = parseManifestDocument(manifest(), undefined, "x");
    assert.equal(doc.kind, "manifest");
    assert.equal(doc.kind === "manifest" && doc.layers.length, 2);
  });
  it("takes the media type from Content-Type when the body has none", () => {
    const body = bytes({ schemaVersion: 2, manifests: [{ ...d("e", MediaTypes.dockerManifest), platform: { os: "linux", architecture: "amd64" } }] });
    const doc = parseManifestDocument(body, `${MediaTypes.dockerManifestList}; charset=utf-8`, "x");
    assert.equal(doc.kind === "index" && doc.mediaType, MediaTypes.dockerManifestList);
    assert.deepEqual(doc.kind === "index" && doc.manifests[0]?.platform, { os: "linux", architecture: "amd64" });
  });
  const bad: [string, Uint8Array, RegExp][] = [
    ["non-JSON", Buffer.from("<html>"), /not JSON/],
    ["schema 1", bytes({ schemaVersion: 1, name: "x" }), /schemaVersion 1 is not supported/],
    ["artifact config", manifest({ config: d("c", "application/vnd.cncf.helm.config.v1+json") }), /not a container image config/],
    ["unknown layer type", manifest({ layers: [d("a", "application/vnd.in-toto+json")] }), /has media type application\/vnd.in-toto\+json/],
    ["sha512 digest", manifest({ layers: [{ ...d("a"), digest: `sha512:${"a".repeat(128)}` }] }), /algorithm sha512 is not supported/],
    ["path-like digest", manifest({ layers: [{ ...d("a"), digest: "sha256:../../etc/passwd" }] }), /sha256:<64 lowercase hex>/],
    ["negative size", manifest({ layers: [{ ...d("a"), size: -1 }] }), /not a non-negative integer/],
    ["foreign urls", manifest({ layers: [{ ...d("a"), urls: ["http://elsewhere/x"] }] }), /foreign URLs/],
    ["too many layers", manifest({ layers: Array.from({ length: 1001 }, () => d("a")) }), /more than 1000/],
    ["unknown type", bytes({ schemaVersion: 2, mediaType: "text/plain" }), /not an OCI or Docker v2 image manifest or index/],
  ];
  for (const [name, body, message] of bad) {
    it(`rejects ${name}`, () => assert.throws(() => parseManifestDocument(body, undefined, "x"), message));
  }
});
