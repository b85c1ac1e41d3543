import { test } from "node:test";
import assert from "node:assert/strict";
import { Readable } from "node:stream";
import { readWebhookBody } from "./webhook-body.ts";

test("a body within the limit is read whole", async () => {
  const read = await readWebhookBody(Readable.from([Buffer.from("ab"), Buffer.from("cd")]), "4", 4);
  assert.deepEqual(read, { ok: true, body: Buffer.from("abcd") });
});

test("a declared length over the limit is refused without reading", async () => {
  let pulled = false;
  const stream = (async function* () {
    pulled = true;
    yield Buffer.from("x");
  })();
  assert.deepEqual(await readWebhookBody(stream, "5", 4), { ok: false, reason: "declared body of 5 bytes exceeds the limit of 4" });
  assert.equal(pulled, false);
});

test("a body that grows past the limit is abandoned there, whatever it declared", async () => {
  let chunksPulled = 0;
  const stream = (async function* () {
    for (;;) {
      chunksPulled++;
      yield Buffer.alloc(1024);
    }
  })();
  assert.deepEqual(await readWebhookBody(stream, undefined, 4096), { ok: false, reason: "body exceeds the limit of 4096 bytes" });
  assert.equal(chunksPulled, 5);
});
