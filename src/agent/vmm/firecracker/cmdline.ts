import { terminalError } from "../../../shared/index.ts";

/**
 * The kernel arguments a Firecracker guest needs, for whoever builds a VmSpec's `cmdline` (the driver
 * passes the spec's line unchanged). Firecracker has no ACPI power button and no PCI on x86 (v1.12):
 * - `reboot=k`: a guest reboot goes through the i8042 keyboard controller, which Firecracker turns
 *   into its own exit, so a reboot (and Ctrl+Alt+Del from `stop()`) ends the VMM;
 * - `panic=1`: a kernel panic reboots after 1 s, hence also ends the VMM instead of hanging;
 * - `pci=off`: no PCI probing (there is no PCI bus; probing costs boot time);
 * - `console=ttyS0`: the serial console, which Firecracker writes to its stdout (`console.log`).
 */
export const FIRECRACKER_BASE_CMDLINE = ["console=ttyS0", "reboot=k", "panic=1", "pci=off"] as const;

/**
 * The base arguments followed by `extra`; an extra `reboot=`/`panic=`/`console=` replaces the base one.
 * Throws a terminal `KernelArgInvalid` for an argument Firecracker's boot_args cannot carry as one word.
 */
export function firecrackerCmdline(extra: readonly string[]): string {
  const overridden = new Set(extra.map((a) => a.split("=")[0]));
  const base = FIRECRACKER_BASE_CMDLINE.filter((a) => !overridden.has(a.split("=")[0]));
  for (const arg of extra) {
    if (!/^[\x21-\x7e]+$/.test(arg)) throw terminalError(
        "KernelArgInvalid",
        `Cannot put ${JSON.stringify(arg)} on the kernel command line: each argument must be one word of printable ASCII (no spaces or control characters); split it or fix the kernel/boot arguments of the VM template or node config`,
        { context: { arg: arg.slice(0, 100) } },
      );
  }
  return [...base, ...extra].join(" ");
}
