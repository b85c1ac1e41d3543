import { test } from "node:test";
import assert from "node:assert/strict";
import { inspect, format } from "node:util";
import { pino } from "pino";
import { Writable } from "node:stream";
import { RunnerJitConfig } from "./jit-config.ts";

const SECRET = "eyJzZWNyZXQiOiJkby1ub3QtbG9nLW1lIn0=";

test("a jitconfig prints as [redacted] in every textual form and reveals only on request", () => {
  const config = new RunnerJitConfig(SECRET);
  const forms = [String(config), `${config}`, JSON.stringify({ config }), inspect(config), inspect({ nested: { config } }, { depth: 5 }), format("%s %o %O %j", config, config, config, config)];
  for (const form of forms) assert.ok(!form.includes(SECRET), form);
  assert.equal(JSON.stringify({ config }), '{"config":"[redacted]"}');
  assert.equal(config.reveal(), SECRET);
  assert.deepEqual(Object.keys(config), [], "no enumerable property holds the value");
});

test("logging an object that holds a jitconfig does not leak it", () => {
  const lines: string[] = [];
  const sink = new Writable({ write(chunk: Buffer, _enc, done) { lines.push(chunk.toString()); done(); } });
  const logger = pino(sink);
  logger.info({ setup: new RunnerJitConfig(SECRET), runner: "imp-1" }, "minted");
  logger.info(`setup ${new RunnerJitConfig(SECRET)}`);
  assert.equal(lines.length, 2);
  for (const line of lines) assert.ok(!line.includes(SECRET), line);
});

test("an empty setup is refused", () => {
  assert.throws(() => new RunnerJitConfig(""), TypeError);
});
