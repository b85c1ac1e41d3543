/**
 * Spawn-to-hello time of a real QEMU microvm (TCG, Debian cloud kernel, Imp's initramfs, the guest
 * agent as PID 1): from spawning QEMU to the guest agent's `hello` reply, per guest channel. Boots
 * run one at a time; each VM is powered off (and killed if it does not exit) before the next.
 *
 *   node bench/guest-boot.ts [--boots 5] [--channels vsock,serial]     (npm run bench:boot)
 */
import { parseArgs } from "node:util";
import { bootTestVm, loadBootKit } from "../test/harness/vm.ts";

const { values } = parseArgs({ options: { boots: { type: "string", default: "5" }, channels: { type: "string", default: "vsock,serial" } } });
const boots = Number(values.boots);
const kit = await loadBootKit();

/** Nearest-rank percentile of sorted samples. */
function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? Number.NaN;
}

const rows: string[][] = [["channel", "boots", "median ms", "p95 ms", "min ms", "max ms"]];
for (const channel of values.channels.split(",") as ("vsock" | "serial")[]) {
  if (channel === "vsock" && kit.vhostDeviceVsock === null) {
    rows.push([channel, "0", `unavailable: ${kit.vhostDeviceVsockError ?? "?"}`, "", "", ""]);
    continue;
  }
  const samples: number[] = [];
  for (let i = 0; i < boots; i++) {
    const t = await bootTestVm({ name: `bench-${channel}`, channel });
    samples.push(t.bootMs);
    try {
      await t.client.shutdown("poweroff");
      await Promise.race([t.vm.exited(), new Promise((r) => setTimeout(r, 10_000))]);
    } finally {
      await t.dispose(true);
    }
  }
  const sorted = [...samples].sort((a, b) => a - b);
  rows.push([channel, String(boots), ...[percentile(sorted, 50), percentile(sorted, 95), sorted[0] ?? NaN, sorted.at(-1) ?? NaN].map((v) => v.toFixed(0))]);
}

const widths = rows[0]?.map((_, col) => Math.max(...rows.map((r) => (r[col] ?? "").length))) ?? [];
for (const row of rows) console.log(row.map((cell, col) => cell.padEnd(widths[col] ?? 0)).join("  "));
console.log(`kernel ${kit.kernelRelease}, TCG, 1 vCPU, 512 MiB, boot kit ${kit.key}`);
