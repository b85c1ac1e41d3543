import { retryableError, terminalError } from "../../shared/index.ts";
import { cidrContains, cidrSize, formatIpv4, parseIpv4, type Ipv4Cidr } from "./ipv4.ts";

/** What a guest needs to configure its interface (the guest protocol's `configure.network`) plus its MAC. */
export interface GuestAddress {
  readonly vmId: string;
  readonly ip: string;
  readonly prefix: number;
  /** `ip/prefix`, as `configure.network.address` takes it. */
  readonly address: string;
  readonly gateway: string;
  readonly mac: string;
}

/**
 * Hands out the VM subnet's host addresses: the first is the gateway, the last the broadcast. Pure
 * bookkeeping, no I/O. Deterministic for a given history: the next allocation takes the first free
 * address after the last one handed out (wrapping), so a released address is reused as late as
 * possible — late packets of a stopped VM's connections (conntrack, the node's ARP cache) then do not
 * reach the VM that gets its address next. Never two VMs on one address.
 */
export class AddressAllocator {
  readonly #subnet: Ipv4Cidr;
  readonly #gateway: number;
  readonly #byVm = new Map<string, number>();
  readonly #byIp = new Map<number, string>();
  #cursor: number;

  constructor(subnet: Ipv4Cidr) {
    this.#subnet = subnet;
    this.#gateway = subnet.network + 1;
    this.#cursor = this.#gateway;
  }

  get capacity(): number {
    return cidrSize(this.#subnet) - 3;
  }

  /** The VM's address: the one it already has, or a new one. Throws NetworkAddressesExhausted when none is free. */
  allocate(vmId: string): GuestAddress {
    const held = this.#byVm.get(vmId);
    if (held !== undefined) return this.#describe(vmId, held);
    const first = this.#gateway + 1;
    const last = this.#subnet.network + cidrSize(this.#subnet) - 2;
    const span = last - first + 1;
    for (let step = 1; step <= span; step++) {
      const candidate = first + ((this.#cursor - first + step) % span + span) % span;
      if (!this.#byIp.has(candidate)) {
        this.#take(vmId, candidate);
        this.#cursor = candidate;
        return this.#describe(vmId, candidate);
      }
    }
    // Retryable: addresses come free as VMs end.
    throw retryableError("NetworkAddressesExhausted", `Cannot allocate an address for VM ${vmId}: all ${span} addresses of the VM subnet are in use`);
  }

  /** Records an address found on the node (after an agent restart). Throws if it is taken or not a VM address. */
  adopt(vmId: string, ipText: string): GuestAddress {
    const ip = parseIpv4(ipText);
    const broadcast = this.#subnet.network + cidrSize(this.#subnet) - 1;
    if (!cidrContains(this.#subnet, ip) || ip === this.#subnet.network || ip === this.#gateway || ip === broadcast) {
      throw terminalError("NetworkAddressInvalid", `Cannot adopt address ${ipText} for VM ${vmId}: not a VM address of the subnet`);
    }
    const owner = this.#byIp.get(ip);
    const held = this.#byVm.get(vmId);
    if ((owner !== undefined && owner !== vmId) || (held !== undefined && held !== ip)) {
      throw terminalError("NetworkAddressConflict", `Cannot adopt address ${ipText} for VM ${vmId}: ${owner !== undefined && owner !== vmId ? `VM ${owner} holds it` : `the VM holds ${formatIpv4(held ?? 0)}`}`);
    }
    this.#take(vmId, ip);
    if (ip > this.#cursor) this.#cursor = ip;
    return this.#describe(vmId, ip);
  }

  /** Frees the VM's address; false when it held none. */
  release(vmId: string): boolean {
    const ip = this.#byVm.get(vmId);
    if (ip === undefined) return false;
    this.#byVm.delete(vmId);
    this.#byIp.delete(ip);
    return true;
  }

  lookup(vmId: string): GuestAddress | undefined {
    const ip = this.#byVm.get(vmId);
    return ip === undefined ? undefined : this.#describe(vmId, ip);
  }

  inUse(): GuestAddress[] {
    return [...this.#byVm].map(([vmId, ip]) => this.#describe(vmId, ip)).sort((a, b) => parseIpv4(a.ip) - parseIpv4(b.ip));
  }

  #take(vmId: string, ip: number): void {
    this.#byVm.set(vmId, ip);
    this.#byIp.set(ip, vmId);
  }

  #describe(vmId: string, ip: number): GuestAddress {
    const text = formatIpv4(ip);
    return { vmId, ip: text, prefix: this.#subnet.prefix, address: `${text}/${this.#subnet.prefix}`, gateway: formatIpv4(this.#gateway), mac: macFor(ip) };
  }
}

/**
 * A locally administered unicast MAC (02:69:6d = "im") ending in the address's low 24 bits: unique
 * within any subnet of /8 or smaller, and the same for the same address, so a node's ARP entry for a
 * reused address can never point at the wrong port.
 */
export function macFor(ip: number): string {
  const bytes = [0x02, 0x69, 0x6d, (ip >>> 16) & 255, (ip >>> 8) & 255, ip & 255];
  return bytes.map((b) => b.toString(16).padStart(2, "0")).join(":");
}
