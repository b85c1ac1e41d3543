/** Shared by the benchmarks: nearest-rank percentiles and a Markdown table on stdout. */

/** Nearest-rank percentile (p in 0–100) of the samples; NaN for none. */
export function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? Number.NaN;
}

export const median = (values: readonly number[]): number => percentile(values, 50);

/** Prints a titled Markdown table; numbers with two decimals below 100, none above. */
export function table(title: string, header: readonly string[], rows: readonly (readonly (string | number)[])[]): void {
  const cells = [header, ...rows.map((r) => r.map((c) => (typeof c !== "number" ? c : Number.isNaN(c) ? "–" : Number.isInteger(c) ? String(c) : c.toFixed(Math.abs(c) >= 100 ? 0 : 2))))];
  const widths = header.map((_, i) => Math.max(...cells.map((r) => String(r[i]).length)));
  const line = (r: readonly (string | number)[]): string => `| ${r.map((c, i) => String(c).padEnd(widths[i] ?? 0)).join(" | ")} |`;
  process.stdout.write(`\n${title}\n${line(header)}\n| ${widths.map((w) => "-".repeat(w)).join(" | ")} |\n${cells.slice(1).map(line).join("\n")}\n`);
}
