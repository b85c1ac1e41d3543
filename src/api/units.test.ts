import assert from "node:assert/strict";
import { test } from "node:test";
import { DURATION_PATTERN, parseDurationMs, parseSizeMiB, SIZE_PATTERN } from "./index.ts";

test("parseSizeMiB() converts Mi, Gi and Ti to MiB", () => {
  assert.equal(parseSizeMiB("512Mi"), 512);
  assert.equal(parseSizeMiB("8Gi"), 8192);
  assert.equal(parseSizeMiB("1Ti"), 1048576);
});

test("parseSizeMiB() rejects what SIZE_PATTERN rejects", () => {
  for (const bad of ["8GB", "0Gi", "8", "", "1.5Gi", "08Gi"]) {
    assert.equal(new RegExp(SIZE_PATTERN).test(bad), false, bad);
    assert.throws(() => parseSizeMiB(bad), /Cannot parse size/);
  }
});

test("parseDurationMs() adds hours, minutes and seconds", () => {
  assert.equal(parseDurationMs("90s"), 90_000);
  assert.equal(parseDurationMs("1h30m"), 5_400_000);
  assert.equal(parseDurationMs("6h"), 21_600_000);
  assert.equal(parseDurationMs("1h2m3s"), 3_723_000);
});

test("parseDurationMs() rejects what DURATION_PATTERN rejects, and the empty string", () => {
  for (const bad of ["6 hours", "1d", "30m1h", "-5s"]) {
    assert.equal(new RegExp(DURATION_PATTERN).test(bad), false, bad);
    assert.throws(() => parseDurationMs(bad), /Cannot parse duration/);
  }
  assert.throws(() => parseDurationMs(""), /Cannot parse duration/);
});
