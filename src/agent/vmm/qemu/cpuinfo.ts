import { readFile } from "node:fs/promises";

/**
 * The host's TSC frequency in kHz from /proc/cpuinfo text ("cpu MHz : 2596.122" → 2596122), or
 * undefined if no line has a usable value. Under TCG the guest's TSC runs at this rate; passing it as
 * `tsc_early_khz=` spares the guest the calibration that hangs microvm boots now and then.
 */
export function parseCpuinfoTscKhz(cpuinfo: string): number | undefined {
  for (const line of cpuinfo.split("\n")) {
    const match = /^cpu MHz\s*:\s*([0-9]+(?:\.[0-9]+)?)\s*$/.exec(line);
    if (match?.[1] === undefined) continue;
    const khz = Math.round(Number(match[1]) * 1000);
    if (Number.isFinite(khz) && khz > 0) return khz;
  }
  return undefined;
}

/** {@link parseCpuinfoTscKhz} of this host's /proc/cpuinfo. */
export async function readHostTscKhz(path = "/proc/cpuinfo"): Promise<number | undefined> {
  return parseCpuinfoTscKhz(await readFile(path, "utf8"));
}
