import { test } from "node:test";
import assert from "node:assert/strict";
import { chmod, mkdtemp, readdir, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ImpError } from "../../shared/index.ts";
import { loadOrCreateNodeKey, NODE_KEY_FILE } from "./node-key-store.ts";

test("the node key is created once with mode 0600 and reloads to the same public key", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "imp-key-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const first = await loadOrCreateNodeKey(dir);
  const again = await loadOrCreateNodeKey(dir);
  assert.equal(again.publicKey, first.publicKey);
  assert.equal((await stat(join(dir, NODE_KEY_FILE))).mode & 0o777, 0o600);
  assert.deepEqual(await readdir(dir), [NODE_KEY_FILE], "no temporary file left");
});

test("a key file readable by others is refused with a message that says what to do", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "imp-key-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  await loadOrCreateNodeKey(dir);
  await chmod(join(dir, NODE_KEY_FILE), 0o644);
  await assert.rejects(loadOrCreateNodeKey(dir), (err) => err instanceof ImpError && err.code === "SetupKeyExposed" && /0600/.test(err.message));
});
