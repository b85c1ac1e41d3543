/** Options and formatting shared by the `imp image` subcommands. */
import type { Command } from "commander";

export const DEFAULT_STORE = "/var/lib/imp/images";

/** Adds `--store <dir>` (default `$IMP_STORE`, else /var/lib/imp/images). */
export const withStoreOption = (command: Command): Command =>
  command.option("--store <dir>", `content store directory (default: $IMP_STORE or ${DEFAULT_STORE})`);

export const storeDir = (opts: { store?: string }): string => opts.store ?? process.env.IMP_STORE ?? DEFAULT_STORE;

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

/** 1536 → "1.5 KiB"; exact bytes below 1 KiB. */
export function humanBytes(bytes: number): string {
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${bytes} B` : `${value.toFixed(value < 10 ? 2 : 1)} ${UNITS[unit]}`;
}

/** `sha256:0123456789ab…` shortened to its first 12 hex digits. */
export const shortDigest = (digest: string): string => digest.replace(/^sha256:/, "").slice(0, 12);

/** Left-aligned text table with two spaces between columns. */
export function table(rows: readonly (readonly string[])[]): string {
  const widths: number[] = [];
  for (const row of rows) row.forEach((cell, i) => { widths[i] = Math.max(widths[i] ?? 0, cell.length); });
  return rows.map((row) => row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i] ?? 0))).join("  ")).join("\n") + "\n";
}
