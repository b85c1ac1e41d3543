/**
 * Network namespaces for the network tests: created with unique names, every command bounded, and
 * everything removed at the end (`dispose`), with a check that nothing of the test's network is left.
 * Traffic in these tests flows only between addresses inside the namespaces created here.
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { promisify } from "node:util";
import { Child } from "../../../src/shared/index.ts";

const execFileAsync = promisify(execFile);
const here = import.meta.dirname;

/** Runs a command, bounded; returns stdout. */
export async function sh(argv: readonly string[], timeoutMs = 15_000): Promise<string> {
  const [cmd = "", ...args] = argv;
  const { stdout } = await execFileAsync(cmd, args, { timeout: timeoutMs, killSignal: "SIGKILL", maxBuffer: 8 << 20 });
  return stdout;
}

/** Why this machine cannot run the network tests, or undefined when it can. */
export async function networkTestsUnavailable(): Promise<string | undefined> {
  if (process.getuid?.() !== 0) return "needs root (network namespaces, bridges, nftables)";
  for (const tool of ["ip", "nft", "bridge"]) {
    try {
      await sh(["sh", "-c", `command -v ${tool}`]);
    } catch {
      return `${tool} is not installed (scripts/setup.d/47-network.sh installs nftables and iproute2)`;
    }
  }
  const probe = `imp-probe-${randomBytes(3).toString("hex")}`;
  try {
    await sh(["ip", "netns", "add", probe]);
    await sh(["ip", "netns", "exec", probe, "nft", "list", "tables"]);
  } catch (err) {
    return `cannot create a network namespace with nftables here: ${String(err)}`;
  } finally {
    await sh(["ip", "netns", "del", probe]).catch(() => undefined);
  }
  return undefined;
}

export interface ProbeResult {
  readonly target: string;
  readonly ok: boolean;
  readonly reply?: string;
  readonly error?: string;
}

export class TestNetwork {
  /** Unique to this run; every namespace's name starts with it. */
  readonly prefix = `imt${randomBytes(3).toString("hex")}`;
  readonly #namespaces: string[] = [];
  readonly #children: Child[] = [];

  /** Creates a namespace with `lo` up and returns its name. */
  async namespace(role: string): Promise<string> {
    const name = `${this.prefix}-${role}`;
    await sh(["ip", "netns", "add", name]);
    this.#namespaces.push(name);
    await sh(["ip", "-n", name, "link", "set", "lo", "up"]);
    return name;
  }

  /** Runs a command inside a namespace. */
  exec(ns: string, argv: readonly string[], timeoutMs?: number): Promise<string> {
    return sh(["ip", "netns", "exec", ns, ...argv], timeoutMs);
  }

  /** Starts tcp-server.fixture.ts in `ns` and waits until it listens. */
  async server(ns: string, name: string, listen: readonly string[]): Promise<void> {
    const child = new Child(`server ${name}`, "ip", ["netns", "exec", ns, process.execPath, join(here, "tcp-server.fixture.ts"), name, ...listen], {
      stdio: ["ignore", "pipe", "pipe"],
      dieWithParent: true,
    });
    this.#children.push(child);
    await child.spawned();
    await new Promise<void>((resolve, reject) => {
      let out = "";
      let err = "";
      const timer = setTimeout(() => reject(new Error(`server ${name} in ${ns} did not listen within 20 s: ${err}`)), 20_000);
      child.process.stderr?.on("data", (c: Buffer) => (err += c.toString()));
      child.process.stdout?.on("data", (c: Buffer) => {
        out += c.toString();
        if (out.includes("ready\n")) {
          clearTimeout(timer);
          resolve();
        }
      });
      void child.exited().then((exit) => {
        clearTimeout(timer);
        reject(new Error(`server ${name} in ${ns} exited (${JSON.stringify(exit)}): ${err}`));
      });
    });
  }

  /** Tries every target concurrently from `ns`; a target is `host:port` or `host:port@localAddress`. */
  async probe(ns: string, targets: readonly string[], timeoutMs = 4_000): Promise<Map<string, ProbeResult>> {
    const out = await this.exec(ns, [process.execPath, join(here, "probe.fixture.ts"), String(timeoutMs), ...targets], timeoutMs + 20_000);
    const results = out.trim().split("\n").map((line) => JSON.parse(line) as ProbeResult);
    return new Map(results.map((r) => [r.target, r]));
  }

  /** Stops the servers and deletes every namespace (which removes every link and rule inside). Idempotent. */
  async dispose(): Promise<void> {
    await Promise.all(this.#children.splice(0).map((c) => c.stop(2_000)));
    for (const ns of this.#namespaces.splice(0).reverse()) await sh(["ip", "netns", "del", ns]).catch(() => undefined);
  }

  /** What of this run is left on the machine: namespaces with the prefix, host links with it. */
  async leftovers(): Promise<string[]> {
    const namespaces = (await sh(["ip", "netns", "list"])).split("\n").filter((l) => l.startsWith(this.prefix));
    const links = (JSON.parse(await sh(["ip", "-j", "link", "show"])) as { ifname: string }[]).map((l) => l.ifname).filter((n) => n.includes(this.prefix));
    return [...namespaces, ...links];
  }
}
