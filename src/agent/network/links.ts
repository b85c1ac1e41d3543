/**
 * Observing the node's links (`ip -j -d link show`) and deciding what the manager owns. Pure: the
 * manager reads, these functions decide, the manager acts.
 */
import { parseTapAlias } from "./tap-name.ts";

export interface ObservedLink {
  readonly name: string;
  /** `tun`, `veth`, `bridge`, … ; undefined for plain devices. */
  readonly kind: string | undefined;
  readonly alias: string | undefined;
  readonly master: string | undefined;
}

export interface ObservedPort {
  readonly name: string;
  /** Parsed from the alias; undefined when the link carries none (a half-made or foreign port). */
  readonly owner: ReturnType<typeof parseTapAlias>;
}

/** Parses `ip -j -d link show` output; entries that are not objects with a name are skipped. */
export function parseLinks(json: string): ObservedLink[] {
  const data: unknown = JSON.parse(json === "" ? "[]" : json);
  if (!Array.isArray(data)) return [];
  const links: ObservedLink[] = [];
  for (const entry of data as unknown[]) {
    if (typeof entry !== "object" || entry === null) continue;
    const e = entry as Record<string, unknown>;
    if (typeof e.ifname !== "string") continue;
    const info = typeof e.linkinfo === "object" && e.linkinfo !== null ? (e.linkinfo as Record<string, unknown>) : {};
    links.push({
      name: e.ifname,
      kind: typeof info.info_kind === "string" ? info.info_kind : undefined,
      alias: typeof e.ifalias === "string" ? e.ifalias : undefined,
      master: typeof e.master === "string" ? e.master : undefined,
    });
  }
  return links;
}

/** The VM ports (taps, or veths in tests) among the links: every link named with the prefix. */
export function vmPorts(links: readonly ObservedLink[], tapPrefix: string): ObservedPort[] {
  return links
    .filter((l) => l.name.startsWith(tapPrefix) && (l.kind === "tun" || l.kind === "veth"))
    .map((l) => ({ name: l.name, owner: parseTapAlias(l.alias) }));
}

/** Ports to remove: those of VMs that are not live, and those whose owner cannot be read. */
export function planSweep(ports: readonly ObservedPort[], live: Pick<ReadonlySet<string>, "has">): ObservedPort[] {
  return ports.filter((p) => p.owner === undefined || !live.has(p.owner.vmId));
}
