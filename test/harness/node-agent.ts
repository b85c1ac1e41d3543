/**
 * A real node agent for tests: in this process, against a real API server, booting real QEMU VMs
 * from an image in a real registry. VMM processes die with the test process unless supervised.
 */
import { mkdir, mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { PassThrough } from "node:stream";
import type { KubeConfig } from "@kubernetes/client-node";
import { createNodeAgent, parseAgentConfig, type NodeAgent } from "../../src/agent/index.ts";
import { createLogger, FaultPoints } from "../../src/shared/index.ts";
import { loadBootKit } from "./vm.ts";

const repoRoot = resolve(import.meta.dirname, "../..");
const cacheDir = process.env.IMP_CACHE ?? join(repoRoot, ".cache");
export const guestAgentPath = process.env.IMP_GUEST_BIN ?? join(cacheDir, "guest/imp-guest");
export const supervisorPath = join(cacheDir, "supervisor/imp-supervisor");

export interface TestAgent {
  readonly agent: NodeAgent;
  readonly nodeName: string;
  readonly stateDir: string;
  /** Everything the agent logged so far (JSON lines). */
  logs(): string;
  /** Stops the agent loop (VMs keep running if supervised). */
  stop(): Promise<void>;
  /** Stops the loop and removes its state directory. */
  dispose(): Promise<void>;
}

export interface TestAgentOptions {
  readonly kubeConfig: KubeConfig;
  readonly nodeName: string;
  readonly supervised?: boolean;
  /** Reuse a state directory (an agent restart); default a new one. */
  readonly stateDir?: string;
  readonly capacity?: { vcpu: number; memoryMiB: number; vmSlots: number };
  readonly extraConfig?: Record<string, unknown>;
}

export async function startTestAgent(options: TestAgentOptions): Promise<TestAgent> {
  const kit = await loadBootKit();
  const stateDir = options.stateDir ?? (await mkdtemp(join(tmpdir(), `imp-agent-${options.nodeName}-`)));
  await mkdir(stateDir, { recursive: true });
  const supervised = options.supervised ?? false;
  const config = parseAgentConfig(
    {
      nodeName: options.nodeName,
      stateDir,
      leaseNamespace: "default",
      capacity: options.capacity ?? { vcpu: 4, memoryMiB: 4096, vmSlots: 4 },
      accel: "tcg",
      vmm: "qemu",
      qemu: { binary: "qemu-system-x86_64", ...(kit.vhostDeviceVsock === null ? {} : { vhostDeviceVsock: kit.vhostDeviceVsock }) },
      kernels: { default: { kernel: kit.kernel, initrd: kit.initrd, args: ["console=ttyS0", "quiet"] } },
      guestAgent: guestAgentPath,
      imageCacheMaxBytes: 4 * 1024 ** 3,
      healthPort: 0,
      supervised,
      ...(supervised ? { supervisorBinary: supervisorPath } : {}),
      ...options.extraConfig,
    },
    {},
  );
  const sink = new PassThrough();
  let logText = "";
  sink.on("data", (chunk: Buffer) => (logText += chunk.toString("utf8")));
  const logger = createLogger({ level: "debug", destination: sink });
  // As `imp agent` does: the fault points armed in the environment (the node-agent test arms them there).
  const faults = FaultPoints.fromEnv(process.env, (point, action) => logger.warn({ point, action: action.kind }, "test fault point fired"));
  const agent = await createNodeAgent({ config, kubeConfig: options.kubeConfig, logger, dieWithParent: !supervised, renewIntervalMs: 1_000, faults });
  const stop = new AbortController();
  const running = agent.start(stop.signal).catch((err: unknown) => {
    logText += `\nagent stopped with error: ${String(err)}\n`;
  });
  let stopped: Promise<void> | undefined;
  const stopAgent = (): Promise<void> => {
    stopped ??= (async () => {
      stop.abort();
      await running;
    })();
    return stopped;
  };
  return {
    agent,
    nodeName: options.nodeName,
    stateDir,
    logs: () => logText,
    stop: stopAgent,
    dispose: async () => {
      await stopAgent();
      await agent.runtime.stopAll();
      await rm(stateDir, { recursive: true, force: true });
    },
  };
}

/** Pids of live processes whose command line mentions `needle` (e.g. a VM's uid), optionally only those whose name starts with `comm`. */
export async function processesMentioning(needle: string, comm?: string): Promise<number[]> {
  const pids: number[] = [];
  for (const entry of await readdir("/proc")) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    const cmdline = await readFile(`/proc/${entry}/cmdline`, "utf8").catch(() => "");
    if (!cmdline.includes(needle)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, "utf8").catch(() => "");
    // Zombies (state Z) are gone for every purpose but the parent's wait.
    if (/\) Z /.test(stat)) continue;
    if (comm !== undefined && !(await readFile(`/proc/${entry}/comm`, "utf8").catch(() => "")).startsWith(comm)) continue;
    pids.push(Number(entry));
  }
  return pids;
}

export function bootKitPresent(): boolean {
  return existsSync(join(cacheDir, "bootkit/current.json")) && existsSync(guestAgentPath);
}
