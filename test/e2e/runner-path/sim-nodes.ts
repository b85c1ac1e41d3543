/**
 * Simulated nodes on one machine, each with a network of its own: a namespace per node whose
 * uplink `up0` is a veth pair into the host's namespace. The node agent keeps its bridge, taps,
 * rules and VM processes inside that namespace (agent config `network.netns`), so two agents here
 * are as separate as two machines on a LAN.
 *
 *   VMs ── imp0 ── node-a ── up0 (198.18.X.1/30) ═ veth ═ <prefix>-a (198.18.X.2/30) ─┐ host: GitHub
 *   VMs ── imp0 ── node-b ── up0 (198.18.X.5/30) ═ veth ═ <prefix>-b (198.18.X.6/30) ─┘ test server
 *
 * The GitHub test server listens on the first node's host-side address: a VM of any node reaches it
 * through its node's NAT and default route, as a runner reaches github.com. Deleting a namespace
 * deletes its veth pair; `leftovers()` proves nothing of a run stays on the host.
 *
 * Several worlds run at once (the demo test and the fault suites in parallel in CI), and their host
 * sides share the host's routing table: each world takes a /24 of its own in 198.18.0.0/15 (the
 * benchmarking range, unused elsewhere), chosen under a host-wide lock among the blocks no address on
 * the host is in. Two worlds on one block would send each other's replies into the wrong namespace.
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, rmdir, stat } from "node:fs/promises";
import { promisify } from "node:util";

const execFileAsync = promisify(execFile);

async function sh(argv: readonly string[], timeoutMs = 15_000): Promise<string> {
  const [cmd = "", ...args] = argv;
  const { stdout } = await execFileAsync(cmd, args, { timeout: timeoutMs, killSignal: "SIGKILL", maxBuffer: 8 << 20 });
  return stdout;
}

export interface SimNodeNet {
  readonly nodeName: string;
  /** The node's network namespace (under /run/netns). */
  readonly netns: string;
  /** The node's uplink inside its namespace. */
  readonly uplink: "up0";
  readonly uplinkAddress: string;
  /** The host-side end of the uplink. */
  readonly hostLink: string;
  readonly hostAddress: string;
}

/** Why this machine cannot run simulated nodes, or undefined when it can. */
export async function simNodesUnavailable(): Promise<string | undefined> {
  if (process.getuid?.() !== 0) return "needs root (network namespaces, veth links, nftables)";
  for (const tool of ["ip", "nft"]) {
    try {
      await sh(["sh", "-c", `command -v ${tool}`]);
    } catch {
      return `${tool} is not installed (scripts/setup.d/47-network.sh installs nftables and iproute2)`;
    }
  }
  return undefined;
}

const LOCK = "/run/lock/imp-e2e-sim-nodes.lock";

/** Runs `fn` holding a host-wide lock (an exclusive mkdir; a lock older than 60 s is stale). */
async function withHostLock<T>(fn: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + 120_000;
  for (;;) {
    try {
      await mkdir(LOCK);
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      const age = await stat(LOCK).then((s) => Date.now() - s.mtimeMs, () => 0);
      if (age > 60_000) await rmdir(LOCK).catch(() => undefined);
      if (Date.now() > deadline) throw new Error(`Cannot take ${LOCK} within 120 s: remove it if no other test runs`);
      await new Promise((r) => setTimeout(r, 100 + Math.random() * 200));
    }
  }
  try {
    return await fn();
  } finally {
    await rmdir(LOCK).catch(() => undefined);
  }
}

export class SimNodes {
  /** Unique to this run; namespaces and host links start with it. */
  readonly prefix = `ime${randomBytes(3).toString("hex")}`;
  readonly nodes: SimNodeNet[] = [];
  /** This world's /24: "198.18.X" or "198.19.X". */
  #block: string | undefined;

  /** The address every VM reaches the host at (the GitHub test server listens here). */
  get serviceAddress(): string {
    const first = this.nodes[0];
    if (first === undefined) throw new Error("no simulated node yet");
    return first.hostAddress;
  }

  async add(nodeName: string): Promise<SimNodeNet> {
    const i = this.nodes.length;
    if (i >= 60) throw new Error("at most 60 simulated nodes fit a /24 in /30s");
    if (this.#block === undefined) return withHostLock(async () => {
      this.#block = await freeBlock();
      return this.#add(nodeName, i, this.#block);
    });
    return this.#add(nodeName, i, this.#block);
  }

  async #add(nodeName: string, i: number, block: string): Promise<SimNodeNet> {
    const suffix = String.fromCharCode(97 + (i % 26)) + (i >= 26 ? String(Math.floor(i / 26)) : "");
    const netns = `${this.prefix}-${suffix}`;
    const hostLink = `${this.prefix}-${suffix}`;
    const uplinkAddress = `${block}.${4 * i + 1}`;
    const hostAddress = `${block}.${4 * i + 2}`;
    await sh(["ip", "netns", "add", netns]);
    const node: SimNodeNet = { nodeName, netns, uplink: "up0", uplinkAddress, hostLink, hostAddress };
    this.nodes.push(node);
    await sh(["ip", "-n", netns, "link", "set", "lo", "up"]);
    await sh(["ip", "link", "add", hostLink, "type", "veth", "peer", "name", "up0", "netns", netns]);
    await sh(["ip", "address", "add", `${hostAddress}/30`, "dev", hostLink]);
    await sh(["ip", "link", "set", hostLink, "up"]);
    await sh(["ip", "-n", netns, "address", "add", `${uplinkAddress}/30`, "dev", "up0"]);
    await sh(["ip", "-n", netns, "link", "set", "up0", "up"]);
    await sh(["ip", "-n", netns, "route", "add", "default", "via", hostAddress]);
    return node;
  }

  /** Every link inside a node's namespace with its alias (the agent names each VM's tap in its alias). */
  async linksOf(node: SimNodeNet): Promise<Array<{ name: string; alias?: string }>> {
    const out = await sh(["ip", "-n", node.netns, "-j", "link", "show"]).catch(() => "[]");
    return (JSON.parse(out) as Array<{ ifname: string; ifalias?: string }>).map((l) => ({ name: l.ifname, ...(l.ifalias === undefined ? {} : { alias: l.ifalias }) }));
  }

  /** Deletes every namespace (and with it each veth pair). Idempotent. */
  async dispose(): Promise<void> {
    for (const node of this.nodes.splice(0).reverse()) {
      await sh(["ip", "netns", "del", node.netns]).catch(() => undefined);
      await sh(["ip", "link", "del", node.hostLink]).catch(() => undefined);
    }
  }

  /** What of this run is left on the host: namespaces and links with the prefix. */
  async leftovers(): Promise<string[]> {
    const namespaces = (await sh(["ip", "netns", "list"])).split("\n").filter((l) => l.startsWith(this.prefix));
    const links = (JSON.parse(await sh(["ip", "-j", "link", "show"])) as { ifname: string }[]).map((l) => l.ifname).filter((n) => n.startsWith(this.prefix));
    return [...namespaces, ...links];
  }
}

/** A /24 of 198.18.0.0/15 that no address on the host is in (call under the host lock). */
async function freeBlock(): Promise<string> {
  const used = new Set(
    (JSON.parse(await sh(["ip", "-j", "-4", "addr", "show"])) as Array<{ addr_info?: Array<{ local?: string }> }>)
      .flatMap((l) => l.addr_info ?? [])
      .map((a) => (a.local ?? "").split(".").slice(0, 3).join(".")),
  );
  const start = Math.floor(Math.random() * 512);
  for (let k = 0; k < 512; k++) {
    const n = (start + k) % 512;
    const block = `198.${18 + (n >> 8)}.${n & 255}`;
    if (!used.has(block)) return block;
  }
  throw new Error("Cannot find a free /24 in 198.18.0.0/15 for simulated nodes");
}
