import assert from "node:assert/strict";
import { Readable, Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { describe, it } from "node:test";
import { pack } from "tar-stream";
import { parsePax, PaxXattrTap } from "./pax-xattr-tap.ts";

async function tarOf(entries: { name: string; content?: string; pax?: Record<string, string>; type?: "file" | "directory" | "symlink"; linkname?: string }[]): Promise<Buffer> {
  const p = pack();
  const chunks: Buffer[] = [];
  const done = (async () => {
    for await (const c of p) chunks.push(c as Buffer);
  })();
  for (const e of entries) p.entry({ name: e.name, type: e.type ?? "file", ...(e.pax === undefined ? {} : { pax: e.pax }), ...(e.linkname === undefined ? {} : { linkname: e.linkname }) }, e.content ?? "");
  p.finalize();
  await done;
  return Buffer.concat(chunks);
}

async function tapAll(tar: Buffer, chunk = 97): Promise<PaxXattrTap> {
  const tap = new PaxXattrTap();
  const parts: Buffer[] = [];
  for (let at = 0; at < tar.length; at += chunk) parts.push(tar.subarray(at, at + chunk));
  await pipeline(Readable.from(parts), tap, new Writable({ write: (_c, _e, cb) => cb() }));
  return tap;
}

describe("parsePax()", () => {
  it("keeps values as raw bytes", () => {
    const value = Buffer.from([0x80, 0x0a, 0x3d, 0xff]);
    const key = Buffer.from("SCHILY.xattr.user.x=");
    const body = Buffer.concat([key, value, Buffer.from("\n")]);
    const len = body.length + 3;
    const records = parsePax(Buffer.concat([Buffer.from(`${len} `), body]));
    assert.deepEqual(records.get("SCHILY.xattr.user.x"), value);
  });

  it("refuses a record whose length runs past the data", () => assert.throws(() => parsePax(Buffer.from("99 a=b\n"))));
});

describe("PaxXattrTap", () => {
  it("hands out each entry's xattrs by index when the name matches, across odd chunk boundaries", async () => {
    const tar = await tarOf([
      { name: "dir", type: "directory" },
      { name: "a", content: "x".repeat(1000), pax: { "SCHILY.xattr.user.one": "1" } },
      { name: "link", type: "symlink", linkname: "a" },
      { name: `${"long/".repeat(40)}b`, content: "y", pax: { "SCHILY.xattr.user.two": "2" } },
    ]);
    const tap = await tapAll(tar);
    assert.equal(tap.xattrsOf(0, "dir"), undefined);
    assert.deepEqual(tap.xattrsOf(1, "a"), new Map([["user.one", Buffer.from("1")]]));
    assert.deepEqual(tap.xattrsOf(3, `${"long/".repeat(40)}b`), new Map([["user.two", Buffer.from("2")]]));
  });

  it("returns nothing when the name disagrees with the caller's", async () => {
    const tap = await tapAll(await tarOf([{ name: "a", pax: { "SCHILY.xattr.user.one": "1" } }]));
    assert.equal(tap.xattrsOf(0, "b"), undefined);
  });

  it("turns itself off on a stream it cannot follow, passing bytes through unchanged", async () => {
    const junk = Buffer.alloc(2048, 0x41);
    junk[156] = 0x78; // 'x' with an absurd size
    junk.write("77777777777", 124, "latin1");
    const tap = new PaxXattrTap();
    const out: Buffer[] = [];
    await pipeline(Readable.from([junk]), tap, new Writable({ write: (c: Buffer, _e, cb) => { out.push(c); cb(); } }));
    assert.deepEqual(Buffer.concat(out), junk);
    assert.equal(tap.xattrsOf(0, "anything"), undefined);
  });
});
