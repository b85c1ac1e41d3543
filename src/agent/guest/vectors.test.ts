/**
 * The guest protocol's golden vectors (testdata/protocol/guest-messages.json), host side: the client
 * writes exactly each request body for the call given, accepts every message the guest may send and
 * refuses the malformed ones. guest/internal/proto/vectors_test.go holds the Go guest to the same file.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { duplexPair } from "node:stream";
import { describe, it } from "node:test";
import { GuestClient } from "./client.ts";
import { FrameDecoder } from "./frame.ts";
import { checkGuestMessage } from "./messages.ts";

interface Vectors {
  readonly requests: ReadonlyArray<{ name: string; call: { method: string; clientName?: string; args?: unknown[] }; body: Record<string, unknown> }>;
  readonly guestMessages: ReadonlyArray<{ name: string; body: unknown }>;
  readonly invalidGuestMessages: ReadonlyArray<{ name: string; body: unknown }>;
}
const vectors = JSON.parse(readFileSync(new URL("../../../testdata/protocol/guest-messages.json", import.meta.url), "utf8")) as Vectors;

/** A call's arguments with its byte fields (base64 in the vectors) as bytes, as the client takes them. */
function argsOf(args: readonly unknown[] = []): unknown[] {
  return args.map((a) => {
    if (typeof a !== "object" || a === null) return a;
    const o = { ...(a as Record<string, unknown>) };
    for (const key of ["entropySeed", "exitRecordKey", "stdin"]) if (typeof o[key] === "string") o[key] = new Uint8Array(Buffer.from(o[key], "base64"));
    return o;
  });
}

describe("guest protocol vectors (host side)", () => {
  for (const v of vectors.requests) {
    it(`writes the request: ${v.name}`, async () => {
      const [host, guest] = duplexPair();
      const client = new GuestClient(host, { clientName: v.call.clientName ?? "imp-agent", requestTimeoutMs: 1_000 });
      const decoder = new FrameDecoder();
      const written = new Promise<unknown>((resolve) => guest.on("data", (chunk: Buffer) => {
        const [body] = decoder.push(chunk);
        if (body !== undefined) resolve(JSON.parse(body.toString("utf8")));
      }));
      const method = (client as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>)[v.call.method];
      assert.equal(typeof method, "function", `GuestClient has no ${v.call.method}`);
      const call = method?.apply(client, argsOf(v.call.args)).catch(() => undefined);
      assert.deepEqual(await written, v.body);
      host.destroy();
      guest.destroy();
      await call;
    });
  }

  it("accepts every message the guest may send", () => {
    for (const v of vectors.guestMessages) {
      const checked = checkGuestMessage(v.body);
      assert.ok(checked.ok, `${v.name}: ${checked.ok ? "" : `${checked.problem.where} ${checked.problem.problem}`}`);
    }
  });

  it("refuses each malformed one", () => {
    for (const v of vectors.invalidGuestMessages) assert.equal(checkGuestMessage(v.body).ok, false, `${v.name} was accepted`);
  });
});
