/** Parsers for the size and duration strings the schemas accept (SIZE_PATTERN, DURATION_PATTERN). */
import { terminalError } from "../shared/index.ts";

const SIZE = /^([1-9][0-9]{0,6})(Mi|Gi|Ti)$/;
const DURATION = /^(?:([0-9]{1,6})h)?(?:([0-9]{1,6})m)?(?:([0-9]{1,6})s)?$/;
const MIB_PER_UNIT = { Mi: 1, Gi: 1024, Ti: 1024 * 1024 } as const;

/** `8Gi` → 8192. Throws a terminal error for anything SIZE_PATTERN rejects. */
export function parseSizeMiB(size: string): number {
  const m = SIZE.exec(size);
  if (m === null) throw terminalError("InvalidSize", `Cannot parse size "${size}": expected a number with Mi, Gi or Ti, e.g. 8Gi`);
  return Number(m[1]) * MIB_PER_UNIT[m[2] as keyof typeof MIB_PER_UNIT];
}

/** `1h30m` → 5400000. Throws a terminal error for anything DURATION_PATTERN rejects, or an empty string. */
export function parseDurationMs(duration: string): number {
  const m = DURATION.exec(duration);
  if (m === null || duration === "") {
    throw terminalError("InvalidDuration", `Cannot parse duration "${duration}": expected hours, minutes, seconds, e.g. 1h30m`);
  }
  const [h, min, s] = [m[1], m[2], m[3]].map((x) => Number(x ?? 0)) as [number, number, number];
  return ((h * 60 + min) * 60 + s) * 1000;
}
