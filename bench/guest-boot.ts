/**
 * Spawn-to-hello time of a real QEMU microvm (TCG, the guest agent as PID 1): from spawning QEMU to
 * the guest agent's `hello` reply, per guest kernel and guest channel:
 *   - debian: Debian's cloud kernel + Imp's initramfs (the boot kit, scripts/setup.d/40-bootkit.sh);
 *   - imp:    Imp's own kernel, no initramfs (scripts/setup.d/42-guest-kernel.sh, docs/kernel.md).
 * Boots run one at a time, each VM powered off (and killed if it does not exit) before the next, and
 * round-robin over the combinations, so load from other work on the machine falls on all of them alike.
 *
 *   - imp-baseline: another build of Imp's kernel (--baseline-kernel <dir of the guest-kernel build
 *               cache>), e.g. from an older imp.config, to see what a fragment change costs at boot.
 *
 *   node bench/guest-boot.ts [--boots 5] [--channels vsock,serial] [--kernels debian,imp] [--baseline-kernel DIR]   (npm run bench:boot)
 */
import { parseArgs } from "node:util";
import { loadavg } from "node:os";
import { loadBootKit } from "../test/harness/vm.ts";
import { bootKernelVm, kernelBoot, loadGuestKernel, type GuestKernelKind } from "../test/integration/bootkit/kernel-vm.ts";
import { percentile } from "./stats.ts";

const { values } = parseArgs({
  options: {
    boots: { type: "string", default: "5" },
    channels: { type: "string", default: "vsock,serial" },
    kernels: { type: "string", default: "debian,imp" },
    "baseline-kernel": { type: "string" },
  },
});
const boots = Number(values.boots);
const kit = await loadBootKit();
const own = await loadGuestKernel();


type KernelChoice = GuestKernelKind | "imp-baseline";
const baseline = values["baseline-kernel"];

interface Combo {
  readonly kernel: KernelChoice;
  readonly channel: "vsock" | "serial";
  readonly label: string;
  readonly samples: number[];
}

const rows: string[][] = [["kernel", "channel", "boots", "median ms", "p95 ms", "min ms", "max ms"]];
const combos: Combo[] = [];
const kernels = [...(values.kernels.split(",") as KernelChoice[]), ...(baseline === undefined ? [] : ["imp-baseline" as const])];
/** The kind bootKernelVm takes and, for the baseline, the build to boot. */
const bootOf = (kernel: KernelChoice): { kernel: GuestKernelKind; impBuild?: string } => (kernel === "imp-baseline" ? { kernel: "imp", ...(baseline === undefined ? {} : { impBuild: baseline }) } : { kernel });
for (const kernel of kernels) {
  for (const channel of values.channels.split(",") as ("vsock" | "serial")[]) {
    if (channel === "vsock" && kit.vhostDeviceVsock === null) {
      rows.push([kernel, channel, "0", `unavailable: ${kit.vhostDeviceVsockError ?? "?"}`, "", "", ""]);
    } else if (kernel === "imp" && own === undefined) {
      rows.push([kernel, channel, "0", "unavailable: run scripts/setup.d/42-guest-kernel.sh", "", "", ""]);
    } else {
      const b = bootOf(kernel);
      combos.push({ kernel, channel, label: (await kernelBoot(b.kernel, b.impBuild)).label, samples: [] });
    }
  }
}

const loads: number[] = [];
for (let i = 0; i < boots; i++) {
  for (const combo of combos) {
    loads.push(loadavg()[0] ?? Number.NaN);
    const t = await bootKernelVm({ name: `bench-${combo.kernel}-${combo.channel}`, ...bootOf(combo.kernel), channel: combo.channel });
    combo.samples.push(t.bootMs);
    try {
      await t.client.shutdown("poweroff");
      await Promise.race([t.vm.exited(), new Promise((r) => setTimeout(r, 10_000).unref())]);
    } finally {
      await t.dispose(true);
    }
  }
}

for (const combo of combos) {
  const sorted = [...combo.samples].sort((a, b) => a - b);
  rows.push([combo.kernel, combo.channel, String(sorted.length), ...[percentile(sorted, 50), percentile(sorted, 95), sorted[0] ?? NaN, sorted.at(-1) ?? NaN].map((v) => v.toFixed(0))]);
}
// Ratios per channel: the machine's noise cancels out better than in absolute numbers.
const ratios: string[] = [];
for (const channel of new Set(combos.map((c) => c.channel))) {
  const median = (kernel: KernelChoice): number | undefined => {
    const combo = combos.find((c) => c.kernel === kernel && c.channel === channel);
    return combo === undefined ? undefined : percentile([...combo.samples].sort((a, b) => a - b), 50);
  };
  const [imp, debian] = [median("imp"), median("debian")];
  if (imp !== undefined && debian !== undefined) ratios.push(`${channel}: imp/debian median ${(imp / debian).toFixed(2)}`);
  const base = median("imp-baseline");
  if (imp !== undefined && base !== undefined) ratios.push(`${channel}: imp/imp-baseline median ${(imp / base).toFixed(2)}`);
}

const widths = rows[0]?.map((_, col) => Math.max(...rows.map((r) => (r[col] ?? "").length))) ?? [];
for (const row of rows) console.log(row.map((cell, col) => cell.padEnd(widths[col] ?? 0)).join("  "));
for (const line of ratios) console.log(line);
for (const label of new Set(combos.map((c) => c.label))) console.log(`kernel: ${label}`);
const sortedLoads = [...loads].sort((a, b) => a - b);
console.log(`TCG, 1 vCPU, 512 MiB, boot kit ${kit.key}, load average (1 min) at boot median ${percentile(sortedLoads, 50).toFixed(1)}, max ${(sortedLoads.at(-1) ?? NaN).toFixed(1)}`);
