import { test } from "node:test";
import assert from "node:assert/strict";
import { generateNodeKeyPair, nodeKeyPairFromPrivate, openSetup, parseSealedSetup, sealSetup, setupKeyId } from "./setup-seal.ts";
import { ImpError } from "../shared/index.ts";

const SENTINEL = "jit-SENTINEL-4c1f0a";
const setup = new TextEncoder().encode(`{"encoded":"${SENTINEL}"}`);

const codeOf = (code: string) => (err: unknown) => err instanceof ImpError && err.code === code;

test("a setup sealed to a node opens with that node's key for that VM only, and the envelope does not contain it", async () => {
  const node = await generateNodeKeyPair();
  const sealed = await sealSetup(setup, node, "uid-1");
  const stored = JSON.stringify(sealed);
  assert.ok(!stored.includes(SENTINEL));
  assert.ok(!Buffer.from(sealed.ct, "base64").toString("latin1").includes(SENTINEL));
  const reread = parseSealedSetup(stored);
  assert.deepEqual(new TextDecoder().decode(await openSetup(reread, node, "uid-1")), new TextDecoder().decode(setup));
  await assert.rejects(openSetup(reread, node, "uid-2"), codeOf("SetupOpenFailed"), "another VM's uid");
});

test("another node's agent cannot open it, whether it claims the key id or not", async () => {
  const [a, b] = [await generateNodeKeyPair(), await generateNodeKeyPair()];
  const sealed = await sealSetup(setup, a, "uid-1");
  await assert.rejects(openSetup(sealed, b, "uid-1"), codeOf("SetupSealedToOtherKey"));
  await assert.rejects(openSetup({ ...sealed, keyId: b.keyId }, b, "uid-1"), codeOf("SetupOpenFailed"));
});

test("a tampered ciphertext or encapsulated key fails authentication", async () => {
  const node = await generateNodeKeyPair();
  const sealed = await sealSetup(setup, node, "uid-1");
  const ct = Buffer.from(sealed.ct, "base64");
  ct[0] = ct[0]! ^ 1;
  await assert.rejects(openSetup({ ...sealed, ct: ct.toString("base64") }, node, "uid-1"), codeOf("SetupOpenFailed"));
  const other = await sealSetup(setup, node, "uid-1");
  await assert.rejects(openSetup({ ...sealed, enc: other.enc }, node, "uid-1"), codeOf("SetupOpenFailed"));
});

test("each seal is fresh: two seals of one setup share no ciphertext or encapsulated key", async () => {
  const node = await generateNodeKeyPair();
  const [x, y] = [await sealSetup(setup, node, "u"), await sealSetup(setup, node, "u")];
  assert.notEqual(x.enc, y.enc);
  assert.notEqual(x.ct, y.ct);
});

test("a stored private key reloads to the same public key and id", async () => {
  const node = await generateNodeKeyPair();
  const again = await nodeKeyPairFromPrivate(node.privateKey);
  assert.equal(again.publicKey, node.publicKey);
  assert.equal(again.keyId, setupKeyId(node.publicKey));
  await assert.rejects(nodeKeyPairFromPrivate(new Uint8Array(31)), codeOf("SetupKeyInvalid"));
});

test("sealing refuses a published key whose id does not match it, and junk envelopes are refused", async () => {
  const node = await generateNodeKeyPair();
  await assert.rejects(sealSetup(setup, { publicKey: node.publicKey, keyId: "0000000000000000" }, "u"), codeOf("SetupKeyInvalid"));
  for (const raw of ["nope", "{}", JSON.stringify({ v: 2, suite: "x", keyId: "a", enc: "", ct: "" }), JSON.stringify({ v: 1, suite: "DHKEM-X25519-HKDF-SHA256/HKDF-SHA256/AES-256-GCM", keyId: "a", enc: "", ct: "A".repeat(100_000) })]) {
    assert.throws(() => parseSealedSetup(raw), codeOf("SetupSealedInvalid"), raw.slice(0, 40));
  }
});
