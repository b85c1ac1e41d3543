import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { parseCpuinfoTscKhz } from "./cpuinfo.ts";

describe("parseCpuinfoTscKhz()", () => {
  it("reads the first cpu MHz line as kHz", () => {
    const text = "processor\t: 0\nmodel name\t: AMD EPYC\ncpu MHz\t\t: 2596.122\ncache size\t: 512 KB\n\ncpu MHz\t\t: 1000.000\n";
    assert.equal(parseCpuinfoTscKhz(text), 2596122);
  });
  it("returns undefined when no line has a positive value", () => {
    assert.equal(parseCpuinfoTscKhz("processor\t: 0\n"), undefined);
    assert.equal(parseCpuinfoTscKhz("cpu MHz\t\t: 0.000\n"), undefined);
    assert.equal(parseCpuinfoTscKhz("cpu MHz\t\t: fast\n"), undefined);
  });
});
