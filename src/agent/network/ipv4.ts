/**
 * IPv4 addresses and CIDR blocks as 32-bit numbers. Small and pure: the allocator and the ruleset
 * generator need containment, overlap and canonical text; a library would bring far more than that.
 */
import { terminalError } from "../../shared/index.ts";

export interface Ipv4Cidr {
  /** The network address (host bits cleared), as an unsigned 32-bit number. */
  readonly network: number;
  readonly prefix: number;
}

const OCTET = /^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$/;

/** Parses dotted-quad text strictly (no leading zeros, no shorthand); undefined when it is not one. */
export function tryParseIpv4(text: string): number | undefined {
  const parts = text.split(".");
  if (parts.length !== 4 || !parts.every((p) => OCTET.test(p))) return undefined;
  return parts.reduce((acc, p) => acc * 256 + Number(p), 0);
}

export function parseIpv4(text: string): number {
  const ip = tryParseIpv4(text);
  if (ip === undefined) throw terminalError("NetworkConfigInvalid", `Cannot use IPv4 address ${JSON.stringify(text)}: not a dotted-quad address`);
  return ip;
}

export function formatIpv4(ip: number): string {
  return [ip >>> 24, (ip >>> 16) & 255, (ip >>> 8) & 255, ip & 255].join(".");
}

function maskOf(prefix: number): number {
  return prefix === 0 ? 0 : (0xffff_ffff << (32 - prefix)) >>> 0;
}

/** Parses `a.b.c.d/n` (or a bare address as /32). Host bits must be zero, so a typo cannot silently widen a block. */
export function parseIpv4Cidr(text: string): Ipv4Cidr {
  const [addr = "", prefixText, ...rest] = text.split("/");
  const prefix = prefixText === undefined ? 32 : /^(3[0-2]|[12]?[0-9])$/.test(prefixText) ? Number(prefixText) : NaN;
  const ip = tryParseIpv4(addr);
  if (ip === undefined || Number.isNaN(prefix) || rest.length > 0) {
    throw terminalError("NetworkConfigInvalid", `Cannot use IPv4 block ${JSON.stringify(text)}: not a.b.c.d/n`);
  }
  const network = (ip & maskOf(prefix)) >>> 0;
  if (network !== ip) {
    throw terminalError("NetworkConfigInvalid", `Cannot use IPv4 block ${text}: host bits are set (the block is ${formatIpv4(network)}/${prefix})`);
  }
  return { network, prefix };
}

export function formatIpv4Cidr(cidr: Ipv4Cidr): string {
  return `${formatIpv4(cidr.network)}/${cidr.prefix}`;
}

export function cidrSize(cidr: Ipv4Cidr): number {
  return 2 ** (32 - cidr.prefix);
}

export function cidrContains(cidr: Ipv4Cidr, ip: number): boolean {
  return ((ip & maskOf(cidr.prefix)) >>> 0) === cidr.network;
}

export function cidrsOverlap(a: Ipv4Cidr, b: Ipv4Cidr): boolean {
  return cidrContains(a, b.network) || cidrContains(b, a.network);
}

/** Parses `a.b.c.d/n` clearing host bits (as Kubernetes' `isCIDR` accepts `10.1.2.3/8`). */
export function parseIpv4CidrMasked(text: string): Ipv4Cidr {
  const [addr = "", prefixText = "32", ...rest] = text.split("/");
  const ip = tryParseIpv4(addr);
  if (ip === undefined || !/^(3[0-2]|[12]?[0-9])$/.test(prefixText) || rest.length > 0) {
    throw terminalError("NetworkConfigInvalid", `Cannot use IPv4 block ${JSON.stringify(text)}: not a.b.c.d/n`);
  }
  const prefix = Number(prefixText);
  return { network: (ip & maskOf(prefix)) >>> 0, prefix };
}

/** The blocks without those inside another (CIDR blocks nest or are disjoint), sorted: no overlaps left for nft. */
export function minimalCover(blocks: readonly Ipv4Cidr[]): Ipv4Cidr[] {
  const sorted = [...blocks].sort((a, b) => a.network - b.network || a.prefix - b.prefix);
  const out: Ipv4Cidr[] = [];
  for (const block of sorted) {
    const last = out.at(-1);
    if (last !== undefined && cidrContains(last, block.network)) continue;
    out.push(block);
  }
  return out;
}
