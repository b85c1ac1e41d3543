/**
 * V8 flags every `imp` process starts with; `bin/imp.js`'s first line passes them to node (a test
 * keeps the two equal), and the test harness and benchmarks start `imp` processes with them too.
 *
 * `--max-semi-space-size=4` (MiB): on a machine with a lot of memory V8 lets its young generation
 * grow to 32 MiB semi-spaces, and the operator's allocation pattern (a JSON object per watch event,
 * thousands of VMs) keeps it there. Side by side, `npm run bench:operator` (100 VMs) peaked at
 * 314 MiB RSS with the default and at 226 MiB with 4 MiB, with the same live heap (~50 MiB after
 * a full GC), the same CPU time (6.6 s fill, 11.1 s churn) and no measurable change in latency.
 * It must be given at start: `v8.setFlagsFromString` after start does not resize the young generation.
 *
 * `--optimize-for-size`: V8 grows the old generation less eagerly and collects sooner. It buys the
 * operator's RSS target (≤ 250 MB at 1,000 VMs: peak 302 MiB without it, 235 MiB with it) for CPU:
 * side by side at 100 VMs, peak RSS 223 → 179 MiB, CPU per VM 61 → 75 ms (fill) and per runner
 * lifecycle 98 → 113 ms (churn) — a tenth of a second of one core per CI job.
 */
export const IMP_NODE_FLAGS: readonly string[] = ["--max-semi-space-size=4", "--optimize-for-size"];

/** The first line `bin/imp.js` must have. */
export const IMP_SHEBANG = `#!/usr/bin/env -S node ${IMP_NODE_FLAGS.join(" ")}`;
