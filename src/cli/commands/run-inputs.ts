/**
 * `imp run`'s inputs: its flags checked and turned into numbers and an environment, the boot kit's
 * defaults for kernel and vsock backend, and the state directory made ready (a killed run's VM
 * directory removed).
 */
import { mkdir, readdir, readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { DEFAULT_RUNTIME_TIMEOUTS, VmDir, type RuntimeTimeouts, type VmmKind } from "../../agent/index.ts";
import { processState, terminalError } from "../../shared/index.ts";

export function positiveInt(flag: string, text: string, max: number): number {
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 1 || value > max) throw terminalError("RunInvalid", `Cannot run: ${flag} must be a whole number in 1..${max}, not ${JSON.stringify(text)}`);
  return value;
}

export function envOf(pairs: readonly string[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const pair of pairs) {
    const at = pair.indexOf("=");
    if (at <= 0) throw terminalError("RunInvalid", `Cannot run: --env takes KEY=VALUE, not ${JSON.stringify(pair)}`);
    env[pair.slice(0, at)] = pair.slice(at + 1);
  }
  return env;
}

export interface BootKitDefaults {
  readonly kernel: string;
  readonly initrd: string;
  readonly vhostDeviceVsock: string | undefined;
}

/** The kernel, initramfs and vsock backend the set-up's boot kit recorded; undefined without one. */
export async function bootKitDefaults(cache: string): Promise<BootKitDefaults | undefined> {
  const path = join(cache, "bootkit", "current.json");
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch {
    return undefined;
  }
  const kit = JSON.parse(text) as Partial<Record<keyof BootKitDefaults, unknown>>;
  if (typeof kit.kernel !== "string" || typeof kit.initrd !== "string") throw terminalError("BootKitInvalid", `Cannot read boot kit ${path}: no kernel and initrd`);
  return { kernel: kit.kernel, initrd: kit.initrd, vhostDeviceVsock: typeof kit.vhostDeviceVsock === "string" ? kit.vhostDeviceVsock : undefined };
}

/**
 * VM directories live beside the image cache (the base disk is a hard link); those of runs that
 * were killed (their pid is gone) are removed here, since nothing else would.
 */
export async function readyVmsDir(stateDir: string): Promise<void> {
  const vmsDir = VmDir.vmsDir(stateDir);
  await mkdir(vmsDir, { recursive: true });
  for (const name of await readdir(vmsDir)) {
    const pid = /^run-([0-9]+)-/.exec(name)?.[1];
    if (pid === undefined || Number(pid) === process.pid || processState(Number(pid)) !== "gone") continue;
    await rm(join(vmsDir, name), { recursive: true, force: true });
  }
}

/** The flags of `imp run`, as commander hands them over. */
export interface RunOpts {
  image: string;
  cpus: string;
  memory: string;
  vmm: string;
  disk: string;
  env: string[];
  cwd?: string;
  guestAgent?: string;
  kernel?: string;
  initrd?: string;
  qemu: string;
  vhostDeviceVsock?: string;
  firecracker?: string;
  stateDir?: string;
  plainHttp?: boolean;
  bootTimeout: string;
  quiet?: boolean;
}

/** imp run stops sooner than a node agent: a person waits at the terminal. */
const TIMEOUTS: Omit<RuntimeTimeouts, "bootMs"> = { ...DEFAULT_RUNTIME_TIMEOUTS, requestMs: 30_000, stopGraceMs: 3_000, powerOffMs: 5_000 };

/** The VM's shape from the flags, checked. */
export interface RunShape {
  readonly vmm: VmmKind;
  readonly vcpus: number;
  readonly memoryMiB: number;
  readonly scratchBytes: number;
  readonly timeouts: RuntimeTimeouts;
}

export function shapeOf(opts: RunOpts): RunShape {
  if (opts.vmm !== "qemu" && opts.vmm !== "firecracker") throw terminalError("RunInvalid", `Cannot run: --vmm must be qemu or firecracker, not ${JSON.stringify(opts.vmm)}`);
  return {
    vmm: opts.vmm,
    vcpus: positiveInt("--cpus", opts.cpus, 64),
    memoryMiB: positiveInt("--memory", opts.memory, 1024 * 1024),
    scratchBytes: positiveInt("--disk", opts.disk, 1024 * 1024) * 1024 * 1024,
    timeouts: { ...TIMEOUTS, bootMs: positiveInt("--boot-timeout", opts.bootTimeout, 3600) * 1000 },
  };
}
