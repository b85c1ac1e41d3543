/**
 * The supervisor protocol's golden vectors (testdata/protocol/supervisor-messages.json), agent side:
 * each request line is written byte for byte, each message parses to its expected form, malformed
 * ones are refused, and supervisor.json and exit.json bodies are read. The Go supervisor's tests
 * (supervisor/internal/server, supervisor/internal/supervise) hold it to the same file.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";
import { encodeRequest, parseMessage, type SupervisorRequest } from "./protocol.ts";
import { parseExitRecord, parseIdentity } from "./records.ts";

interface Vectors {
  readonly requests: ReadonlyArray<{ name: string; request: SupervisorRequest; line: string }>;
  readonly messages: ReadonlyArray<{ name: string; body: unknown; parsed: unknown }>;
  readonly invalidMessages: ReadonlyArray<{ name: string; line: string }>;
  readonly identities: ReadonlyArray<{ name: string; body: unknown }>;
  readonly exitRecords: ReadonlyArray<{ name: string; body: unknown }>;
}
const vectors = JSON.parse(readFileSync(new URL("../../../testdata/protocol/supervisor-messages.json", import.meta.url), "utf8")) as Vectors;

describe("supervisor protocol vectors (agent side)", () => {
  it("has every section filled", () => {
    for (const section of [vectors.requests, vectors.messages, vectors.invalidMessages, vectors.identities, vectors.exitRecords]) assert.ok(section.length > 0);
  });

  for (const v of vectors.requests) {
    it(`writes the request: ${v.name}`, () => {
      assert.equal(encodeRequest(v.request), `${v.line}\n`);
    });
  }

  for (const v of vectors.messages) {
    it(`parses the message: ${v.name}`, () => {
      assert.deepEqual(parseMessage(JSON.stringify(v.body)), v.parsed);
    });
  }

  for (const v of vectors.invalidMessages) {
    it(`refuses: ${v.name}`, () => {
      assert.equal(parseMessage(v.line), undefined);
    });
  }

  for (const v of vectors.identities) {
    it(`reads supervisor.json: ${v.name}`, () => {
      assert.deepEqual(parseIdentity(v.body), v.body);
    });
  }

  for (const v of vectors.exitRecords) {
    it(`reads exit.json: ${v.name}`, () => {
      assert.deepEqual(parseExitRecord(v.body), v.body);
    });
  }
});
