import { createHash } from "node:crypto";
import { terminalError } from "../../shared/index.ts";

/**
 * VM ids as the manager accepts them: Kubernetes object names (DNS subdomain) or `imp run` ids. The
 * id is stored in the tap's alias (IFALIASZ is 256 bytes) so the node's links say whose they are.
 */
const VM_ID = /^[a-z0-9]([a-z0-9.-]{0,198}[a-z0-9])?$/;

export function assertVmId(vmId: string): void {
  if (!VM_ID.test(vmId)) throw terminalError("NetworkVmIdInvalid", `Cannot attach VM ${JSON.stringify(vmId.slice(0, 64))}: the id must be 1-200 of a-z 0-9 . - (a Kubernetes name)`);
}

/**
 * The tap's name: prefix (≤ 5 chars) and as many hex digits of sha256(vmId) as fit in 15 bytes
 * (IFNAMSIZ - 1), at least 10. 40 bits make a collision among one node's VMs vanishingly rare; the
 * manager still refuses one rather than share a tap.
 */
export function tapNameFor(prefix: string, vmId: string): string {
  return prefix + createHash("sha256").update(vmId).digest("hex").slice(0, 15 - prefix.length);
}

export type EgressMode = "none" | "internet" | "restricted";

/**
 * The alias the manager writes on a VM's port: `imp-vm <ip> <egress> <vmId>`. A restricted VM's
 * allowed blocks do not fit in an alias; a manager that adopts the port knows only the mode and
 * allows nothing until the VM is attached again with its policy.
 */
export function tapAlias(ip: string, egress: EgressMode, vmId: string): string {
  return `imp-vm ${ip} ${egress} ${vmId}`;
}

export function parseTapAlias(alias: string | undefined): { readonly ip: string; readonly egress: EgressMode; readonly vmId: string } | undefined {
  const match = /^imp-vm (\d{1,3}(?:\.\d{1,3}){3}) (none|internet|restricted) (\S+)$/.exec(alias ?? "");
  if (match === null || !VM_ID.test(match[3] ?? "")) return undefined;
  return { ip: match[1] ?? "", egress: (match[2] ?? "none") as EgressMode, vmId: match[3] ?? "" };
}
