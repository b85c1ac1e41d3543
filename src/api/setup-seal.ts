/**
 * The sealed one-time runner setup: the contract between the operator (which seals) and the node
 * agent (which opens). HPKE (RFC 9180) base mode, DHKEM(X25519, HKDF-SHA256) / HKDF-SHA256 /
 * AES-256-GCM, by @hpke/core — no hand-made crypto. The recipient is the node the VM is bound to (its
 * agent publishes the public key in ImpNode status); the ImpVM uid is the associated data, so a
 * ciphertext copied into another VM's Secret does not open, and the info string binds the format.
 * The ImpVM's status holds only the envelope: reading it through the API yields nothing usable, and
 * no other node's agent can open it.
 */
import { Aes256Gcm, CipherSuite, DhkemX25519HkdfSha256, HkdfSha256 } from "@hpke/core";
import { createHash } from "node:crypto";
import { terminalError } from "../shared/index.ts";

export const SETUP_SEAL_SUITE = "DHKEM-X25519-HKDF-SHA256/HKDF-SHA256/AES-256-GCM";
const ENVELOPE_VERSION = 1;

/**
 * What an envelope holds, bound into it through HPKE's info string, so one kind can never be
 * opened as the other: `setup` is the one-time runner setup, `inputs` the Secret values a VM's
 * environment and image pull read (src/api/vm-inputs.ts).
 */
export type SealPurpose = "setup" | "inputs";
const INFO: Readonly<Record<SealPurpose, Uint8Array>> = {
  setup: new TextEncoder().encode("imp.dev runner setup v1"),
  inputs: new TextEncoder().encode("imp.dev vm inputs v1"),
};
/** Bound on what is opened: a JIT config is a few KiB; a VM's Secret inputs are held to 256 KiB. */
export const MAX_SEALED_BYTES: Readonly<Record<SealPurpose, number>> = { setup: 64 * 1024, inputs: 256 * 1024 };

const suite = new CipherSuite({ kem: new DhkemX25519HkdfSha256(), kdf: new HkdfSha256(), aead: new Aes256Gcm() });
type HpkeKey = Awaited<ReturnType<typeof suite.kem.deserializePublicKey>>;

/** What the ImpVM's status stores (as JSON: `status.setup.sealed`, `status.inputs.sealed`). */
export interface SealedSetup {
  readonly v: 1;
  readonly suite: typeof SETUP_SEAL_SUITE;
  /** Which node key it was sealed to (ImpNode status.setupKey.keyId). */
  readonly keyId: string;
  /** HPKE encapsulated key, base64. */
  readonly enc: string;
  /** Ciphertext, base64. */
  readonly ct: string;
}

export interface NodeKeyPair {
  /** Raw X25519 public key, base64 (what ImpNode status publishes). */
  readonly publicKey: string;
  /** Raw X25519 private key. Never leaves the node's state directory and the agent's memory. */
  readonly privateKey: Uint8Array;
  readonly keyId: string;
}

/** A short, stable id of a public key: the first 16 hex digits of its SHA-256. */
export function setupKeyId(publicKeyBase64: string): string {
  return createHash("sha256").update(Buffer.from(publicKeyBase64, "base64")).digest("hex").slice(0, 16);
}

export async function generateNodeKeyPair(): Promise<NodeKeyPair> {
  const pair = await suite.kem.generateKeyPair();
  const publicKey = Buffer.from(await suite.kem.serializePublicKey(pair.publicKey)).toString("base64");
  const privateKey = new Uint8Array(await suite.kem.serializePrivateKey(pair.privateKey));
  return { publicKey, privateKey, keyId: setupKeyId(publicKey) };
}

/** The key pair for a stored private key (the public half is derived, so the two can never disagree). */
export async function nodeKeyPairFromPrivate(privateKey: Uint8Array): Promise<NodeKeyPair> {
  if (privateKey.length !== 32) throw terminalError("SetupKeyInvalid", `Cannot load the node's setup key: ${privateKey.length} bytes, expected 32`);
  const key = await suite.kem.deserializePrivateKey(toArrayBuffer(privateKey));
  const publicKeyRaw = await publicOf(key);
  const publicKey = Buffer.from(publicKeyRaw).toString("base64");
  return { publicKey, privateKey, keyId: setupKeyId(publicKey) };
}

/** Seals `plaintext` to the node key `publicKey` for the ImpVM `vmUid`. */
export async function sealSetup(plaintext: Uint8Array, recipient: { readonly publicKey: string; readonly keyId: string }, vmUid: string, purpose: SealPurpose = "setup"): Promise<SealedSetup> {
  if (plaintext.byteLength + 16 > MAX_SEALED_BYTES[purpose]) {
    throw terminalError("SetupSealedInvalid", `Cannot seal the VM's ${purpose}: ${plaintext.byteLength} bytes, over the ${MAX_SEALED_BYTES[purpose]}-byte bound`);
  }
  if (setupKeyId(recipient.publicKey) !== recipient.keyId) {
    throw terminalError("SetupKeyInvalid", `Cannot seal a setup: the node's published key id ${recipient.keyId} does not match its public key`);
  }
  let recipientKey: HpkeKey;
  try {
    recipientKey = await suite.kem.deserializePublicKey(toArrayBuffer(Buffer.from(recipient.publicKey, "base64")));
  } catch (err) {
    throw terminalError("SetupKeyInvalid", `Cannot seal a setup: the node's published public key is not an X25519 key`, { cause: err });
  }
  const sender = await suite.createSenderContext({ recipientPublicKey: recipientKey, info: toArrayBuffer(INFO[purpose]) });
  const ct = await sender.seal(toArrayBuffer(plaintext), toArrayBuffer(new TextEncoder().encode(vmUid)));
  return { v: ENVELOPE_VERSION, suite: SETUP_SEAL_SUITE, keyId: recipient.keyId, enc: Buffer.from(sender.enc).toString("base64"), ct: Buffer.from(ct).toString("base64") };
}

/** Parses an envelope read from the API; anything else is a terminal SetupSealedInvalid. */
export function parseSealedSetup(raw: string, purpose: SealPurpose = "setup"): SealedSetup {
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch {
    throw terminalError("SetupSealedInvalid", "Cannot read the sealed setup: not JSON");
  }
  const v = value as Partial<Record<keyof SealedSetup, unknown>>;
  if (typeof value !== "object" || value === null || v.v !== ENVELOPE_VERSION || v.suite !== SETUP_SEAL_SUITE || typeof v.keyId !== "string" || typeof v.enc !== "string" || typeof v.ct !== "string") {
    throw terminalError("SetupSealedInvalid", `Cannot read the sealed setup: not a version ${ENVELOPE_VERSION} envelope of suite ${SETUP_SEAL_SUITE}`);
  }
  if (Buffer.byteLength(v.ct, "base64") > MAX_SEALED_BYTES[purpose]) throw terminalError("SetupSealedInvalid", `Cannot read the sealed ${purpose}: ciphertext over ${MAX_SEALED_BYTES[purpose]} bytes`);
  return { v: ENVELOPE_VERSION, suite: SETUP_SEAL_SUITE, keyId: v.keyId, enc: v.enc, ct: v.ct };
}

/** Opens an envelope with this node's key for the ImpVM `vmUid`. Fails terminally for any other key or VM. */
export async function openSetup(sealed: SealedSetup, key: NodeKeyPair, vmUid: string, purpose: SealPurpose = "setup"): Promise<Uint8Array> {
  if (sealed.keyId !== key.keyId) {
    throw terminalError("SetupSealedToOtherKey", `Cannot open the setup: it was sealed to key ${sealed.keyId}, this node's key is ${key.keyId}`);
  }
  try {
    const recipient = await suite.createRecipientContext({
      recipientKey: await suite.kem.deserializePrivateKey(toArrayBuffer(key.privateKey)),
      enc: toArrayBuffer(Buffer.from(sealed.enc, "base64")),
      info: toArrayBuffer(INFO[purpose]),
    });
    return new Uint8Array(await recipient.open(toArrayBuffer(Buffer.from(sealed.ct, "base64")), toArrayBuffer(new TextEncoder().encode(vmUid))));
  } catch (err) {
    throw terminalError("SetupOpenFailed", "Cannot open the setup: authentication failed (wrong VM, wrong key, or tampered ciphertext)", { cause: err });
  }
}

async function publicOf(privateKey: HpkeKey): Promise<ArrayBuffer> {
  // WebCrypto derives the public half through a JWK export of the private key (x is the public key).
  const jwk = await crypto.subtle.exportKey("jwk", privateKey);
  if (typeof jwk.x !== "string") throw terminalError("SetupKeyInvalid", "Cannot load the node's setup key: no public half");
  return toArrayBuffer(Buffer.from(jwk.x, "base64url"));
}

function toArrayBuffer(bytes: Uint8Array): ArrayBuffer {
  return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
}
