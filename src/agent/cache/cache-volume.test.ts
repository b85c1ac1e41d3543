/**
 * Cache generations and clones with the real qemu-img and qemu-io (Debian's qemu-utils, installed by
 * set-up): what one clone writes, no other clone and no generation sees; promotion is whole or absent.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { chmod, mkdtemp, readdir, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { ImpError } from "../../shared/index.ts";
import { cloneGeneration, createEmptyGeneration, promoteClone, sweepPartials } from "./index.ts";

const run = promisify(execFile);
const missing = await run("qemu-img", ["--version"]).then(() => undefined, () => "qemu-img is not installed (Debian's qemu-utils; scripts/setup.sh installs it)");
if (missing !== undefined) process.stdout.write(`# cache volumes: cannot run here: ${missing}\n`);

const MiB = 1024 ** 2;
/** An offset past mkfs's metadata at the start of the file, inside every volume here. */
const AT = 48 * MiB;

/** Writes a 64 KiB run of `pattern` at `offset` into an image, through QEMU's block layer. */
async function write(path: string, format: "raw" | "qcow2", pattern: number, offset = AT): Promise<void> {
  await run("qemu-io", ["-f", format, "-c", `write -P ${pattern} ${offset} 64k`, path]);
}

/**
 * Whether the 64 KiB at `offset` are all `pattern`, read through QEMU's block layer. qemu-io exits 1
 * on a mismatch (and says so on stdout); any other failure is an error of the test.
 */
async function holds(path: string, format: "raw" | "qcow2", pattern: number, offset = AT): Promise<boolean> {
  try {
    await run("qemu-io", ["-r", "-f", format, "-c", `read -P ${pattern} ${offset} 64k`, path]);
    return true;
  } catch (err) {
    const e = err as { code?: number; stdout?: string };
    if (e.code === 1 && e.stdout?.includes("Pattern verification failed") === true) return false;
    throw err;
  }
}

const sha = async (path: string): Promise<string> => (await run("sha256sum", [path])).stdout.split(" ")[0] ?? "";

describe("cache volumes: generations, copy-on-write clones, promotion", { skip: missing }, () => {
  let dir = "";
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "imp-cache-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("makes an empty ext4 generation that holds only mkfs's metadata on disk", async () => {
    const gen = await createEmptyGeneration(dir, "empty", 1024 * MiB);
    const st = await stat(gen);
    assert.equal(st.size, 1024 * MiB);
    assert.ok(st.blocks * 512 < 64 * MiB, `sparse: ${st.blocks * 512} bytes allocated`);
    const { stdout } = await run("dumpe2fs", ["-h", gen]);
    assert.match(stdout, /Filesystem volume name:\s+imp-cache/);
    assert.equal((st.mode & 0o777).toString(8), "400", "a generation is never written once published");
  });

  it("clones a 10 GiB generation by writing a header, not the data; clones see the generation, never each other", async () => {
    const gen = await createEmptyGeneration(dir, "big", 10 * 1024 * MiB);
    await write(gen, "raw", 0x5a);
    const [a, b] = [join(dir, "vm-a.qcow2"), join(dir, "vm-b.qcow2")];
    await cloneGeneration(gen, a);
    await cloneGeneration(gen, b);
    assert.equal(((await stat(a)).mode & 0o777).toString(8), "600", "a clone holds a job's writes: its owner's only");
    const size = (await stat(a)).size;
    assert.ok(size < MiB, `a clone of 10 GiB is ${size} bytes`);
    assert.ok(await holds(a, "qcow2", 0x5a), "a clone reads what the generation holds");
    await write(a, "qcow2", 0xab);
    assert.ok(await holds(a, "qcow2", 0xab), "a clone reads its own write");
    assert.ok(await holds(b, "qcow2", 0x5a), "the other clone does not see it");
    assert.ok(await holds(gen, "raw", 0x5a), "nor does the generation");
  });

  it("promotes a clone into a new generation holding its writes; the old generation and other clones are unchanged", async () => {
    const gen = await createEmptyGeneration(dir, "g1", 256 * MiB);
    const [a, b] = [join(dir, "g1-a.qcow2"), join(dir, "g1-b.qcow2")];
    await cloneGeneration(gen, a);
    await cloneGeneration(gen, b);
    await write(a, "qcow2", 0x11);
    await write(b, "qcow2", 0x22);
    const next = await promoteClone(a, gen, dir, "g2");
    assert.ok(await holds(next, "raw", 0x11), "the new generation holds the promoted clone's write");
    assert.ok(await holds(gen, "raw", 0), "the old generation does not");
    assert.ok(await holds(b, "qcow2", 0x22), "a clone of the old generation keeps its own view");
    const { stdout } = await run("dumpe2fs", ["-h", next]);
    assert.match(stdout, /Filesystem volume name:\s+imp-cache/, "the promoted generation is still the ext4 the clone held");
    assert.ok((await stat(next)).blocks * 512 < 64 * MiB, "and stays sparse");
    const c = join(dir, "g2-c.qcow2");
    await cloneGeneration(next, c);
    assert.ok(await holds(c, "qcow2", 0x11), "the next VM's clone starts from the promoted data");
  });

  it("promotes from the generation it is told, never from the one the clone's header names (a VM's QEMU wrote that header)", async () => {
    const gen = await createEmptyGeneration(dir, "hdr1", 128 * MiB);
    const other = await createEmptyGeneration(dir, "hdr-other", 128 * MiB);
    await chmod(other, 0o600);
    await write(other, "raw", 0x77);
    const a = join(dir, "hdr1-a.qcow2");
    await cloneGeneration(gen, a);
    // The header now names another file as the backing (an unsafe rebase rewrites only the header).
    await run("qemu-img", ["rebase", "-u", "-f", "qcow2", "-F", "raw", "-b", other, a]);
    const next = await promoteClone(a, gen, dir, "hdr2");
    assert.ok(await holds(next, "raw", 0), "the promoted generation reads the generation it was told");
    assert.equal(await holds(next, "raw", 0x77), false, "and nothing of the file the header names");
  });

  it("refuses to promote over an existing generation, leaving it as it was", async () => {
    const gen = await createEmptyGeneration(dir, "p1", 128 * MiB);
    const a = join(dir, "p1-a.qcow2");
    await cloneGeneration(gen, a);
    await write(a, "qcow2", 0x33);
    const before = await sha(gen);
    await assert.rejects(promoteClone(a, gen, dir, "p1"), (err: unknown) => err instanceof ImpError && err.code === "CachePromoteFailed" && err.errorClass === "terminal" && /already exists/.test(err.message));
    assert.equal(await sha(gen), before);
  });

  it("a promotion aborted while it writes leaves no generation and no partial file, and says it was aborted", async () => {
    const gen = await createEmptyGeneration(dir, "ab", 512 * MiB);
    const a = join(dir, "ab-a.qcow2");
    await cloneGeneration(gen, a);
    await run("qemu-io", ["-f", "qcow2", "-c", "write -P 0x55 64M 256M", a]);
    const abort = new AbortController();
    let sawPartial = false;
    const watch = setInterval(() => {
      void readdir(dir).then((names) => {
        if (names.some((n) => n.startsWith("gen-ab2.raw.") && n.endsWith(".partial"))) {
          sawPartial = true;
          abort.abort(new Error("the test aborts it"));
        }
      });
    }, 2);
    try {
      await assert.rejects(promoteClone(a, gen, dir, "ab2", { signal: abort.signal }), /the test aborts it/);
    } finally {
      clearInterval(watch);
    }
    assert.ok(sawPartial, "aborted while its partial file existed");
    const names = await readdir(dir);
    assert.ok(!names.includes("gen-ab2.raw"), "no new generation");
    assert.deepEqual(names.filter((n) => n.includes("partial")), []);
  });

  it("two promotions to one id at once: exactly one publishes, whole; the other is refused", async () => {
    const gen = await createEmptyGeneration(dir, "two", 256 * MiB);
    const [a, b] = [join(dir, "two-a.qcow2"), join(dir, "two-b.qcow2")];
    await cloneGeneration(gen, a);
    await cloneGeneration(gen, b);
    await write(a, "qcow2", 0x61);
    await write(b, "qcow2", 0x62);
    const results = await Promise.allSettled([promoteClone(a, gen, dir, "two2"), promoteClone(b, gen, dir, "two2")]);
    assert.equal(results.filter((r) => r.status === "fulfilled").length, 1, JSON.stringify(results.map((r) => r.status)));
    const refused = results.find((r) => r.status === "rejected");
    assert.ok(refused?.status === "rejected" && refused.reason instanceof ImpError && refused.reason.code === "CachePromoteFailed" && /already exists/.test(refused.reason.message));
    const next = join(dir, "gen-two2.raw");
    assert.ok((await holds(next, "raw", 0x61)) !== (await holds(next, "raw", 0x62)), "one clone's view, whole, not a mix");
    assert.deepEqual((await readdir(dir)).filter((n) => n.includes("partial")), []);
  });

  it("refuses a clone of a missing or relative generation, and never truncates an existing file", async () => {
    const gen = await createEmptyGeneration(dir, "r1", 64 * MiB);
    await assert.rejects(cloneGeneration(join(dir, "gen-none.raw"), join(dir, "x.qcow2")), (err: unknown) => err instanceof ImpError && err.code === "CacheCloneFailed" && /does not exist/.test(err.message));
    await assert.rejects(cloneGeneration("gen-r1.raw", join(dir, "y.qcow2")), (err: unknown) => err instanceof ImpError && err.code === "CacheCloneFailed" && /absolute/.test(err.message));
    await assert.rejects(cloneGeneration(gen, "-y.qcow2"), (err: unknown) => err instanceof ImpError && err.code === "CacheCloneFailed" && /absolute/.test(err.message));
    const taken = join(dir, "taken.qcow2");
    await writeFile(taken, "someone else's");
    await assert.rejects(cloneGeneration(gen, taken), (err: unknown) => err instanceof ImpError && err.code === "CacheCloneFailed" && /already exists/.test(err.message));
    assert.equal((await stat(taken)).size, "someone else's".length);
    assert.deepEqual((await readdir(dir)).filter((n) => n.includes("partial") || n === "x.qcow2" || n === "y.qcow2"), []);
  });

  it("refuses generation sizes a volume cannot have, and ids that are not file-name safe", async () => {
    await assert.rejects(createEmptyGeneration(dir, "small", 16 * MiB), (err: unknown) => err instanceof ImpError && err.code === "CacheGenerationFailed");
    await assert.rejects(createEmptyGeneration(dir, "odd", 64 * MiB + 1), (err: unknown) => err instanceof ImpError && err.code === "CacheGenerationFailed");
    await assert.rejects(createEmptyGeneration(dir, "../escape", 64 * MiB), (err: unknown) => err instanceof ImpError && err.code === "CacheGenerationFailed");
    await assert.rejects(createEmptyGeneration(dir, "huge", 2 * 1024 ** 4), (err: unknown) => err instanceof ImpError && err.code === "CacheGenerationFailed");
    assert.deepEqual((await readdir(dir)).filter((n) => /small|odd|escape|huge|mke2fs/.test(n)), [], "nothing left behind");
  });

  it("sweeps what a crash left half-written, and only that", async () => {
    await writeFile(join(dir, "gen-z.raw.0a1b2c3d.partial"), "");
    const before = (await readdir(dir)).filter((n) => !n.endsWith(".partial"));
    assert.deepEqual(await sweepPartials(dir), ["gen-z.raw.0a1b2c3d.partial"]);
    assert.deepEqual(await readdir(dir), before);
  });
});
