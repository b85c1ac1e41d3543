/**
 * What the Firecracker integration tests share: the real binaries from the setup step, a guest
 * kernel that only halts, throwaway VM files, real tap devices (and network namespaces), a launcher
 * that hides /dev/kvm, and checks that nothing was left behind.
 */
import { execFile } from "node:child_process";
import { existsSync, readFileSync, statSync } from "node:fs";
import { mkdtemp, rm, truncate, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import type { TestContext } from "node:test";
import { firecrackerCmdline } from "../../../src/agent/vmm/firecracker/index.ts";
import type { LaunchRequest, ProcessLauncher, VmmProcess, VmSpec } from "../../../src/agent/vmm/types.ts";

const run = promisify(execFile);
const repoRoot = resolve(import.meta.dirname, "../../..");
const cacheDir = process.env.IMP_CACHE ?? join(repoRoot, ".cache");
const binDir = join(cacheDir, "firecracker-1.12.1/bin");

export interface FirecrackerBinaries {
  readonly firecracker: string;
  readonly jailer: string;
}

/** The binaries scripts/setup.d/45-firecracker.sh installs, or a visible skip. */
export function binariesOrSkip(t: TestContext): FirecrackerBinaries | undefined {
  const bins = { firecracker: join(binDir, "firecracker"), jailer: join(binDir, "jailer") };
  for (const path of Object.values(bins)) {
    if (!existsSync(path)) {
      t.skip(`${path} missing: run scripts/setup.d/45-firecracker.sh`);
      return undefined;
    }
  }
  if (process.getuid?.() !== 0) {
    t.skip("needs root (tap devices, network namespaces, the jailer)");
    return undefined;
  }
  return bins;
}

/** Which of the two situations this machine is in; tests branch on it and say which one ran. */
export type KvmSituation = "kvm" | "no-kvm";
export function kvmSituation(): KvmSituation {
  return existsSync("/dev/kvm") ? "kvm" : "no-kvm";
}
export function describeKvm(): string {
  if (!existsSync("/dev/kvm")) return "no /dev/kvm on this machine";
  return existsSync("/sys/module/kvm_pvm") ? "/dev/kvm from the nested PVM module (kvm_pvm)" : "/dev/kvm present";
}

/**
 * A guest "kernel" for Firecracker's ELF loader: one PT_LOAD segment at 16 MiB whose code is
 * `cli; hlt; jmp .-1`. The vCPU halts with interrupts off and stays halted inside KVM, so the VM is
 * Running without burning a CPU, and nothing in it ever answers vsock or Ctrl+Alt+Del.
 */
export function haltKernelElf(): Buffer {
  const base = 0x100_0000n;
  const ehsize = 64;
  const phsize = 56;
  const code = Buffer.from([0xfa, 0xf4, 0xeb, 0xfd]);
  const size = BigInt(ehsize + phsize + code.length);
  const eh = Buffer.alloc(ehsize);
  eh.write("\x7fELF", 0, "latin1");
  eh.writeUInt8(2, 4); // ELFCLASS64
  eh.writeUInt8(1, 5); // little endian
  eh.writeUInt8(1, 6); // EV_CURRENT
  eh.writeUInt16LE(2, 16); // ET_EXEC
  eh.writeUInt16LE(0x3e, 18); // EM_X86_64
  eh.writeUInt32LE(1, 20);
  eh.writeBigUInt64LE(base + BigInt(ehsize + phsize), 24); // entry: the code
  eh.writeBigUInt64LE(BigInt(ehsize), 32); // e_phoff
  eh.writeUInt16LE(ehsize, 52);
  eh.writeUInt16LE(phsize, 54);
  eh.writeUInt16LE(1, 56); // e_phnum
  const ph = Buffer.alloc(phsize);
  ph.writeUInt32LE(1, 0); // PT_LOAD
  ph.writeUInt32LE(5, 4); // R+X
  ph.writeBigUInt64LE(0n, 8); // p_offset
  ph.writeBigUInt64LE(base, 16); // p_vaddr
  ph.writeBigUInt64LE(base, 24); // p_paddr
  ph.writeBigUInt64LE(size, 32); // p_filesz
  ph.writeBigUInt64LE(size, 40); // p_memsz
  ph.writeBigUInt64LE(0x1000n, 48);
  return Buffer.concat([eh, ph, code]);
}

export interface VmFiles {
  readonly dir: string;
  readonly spec: VmSpec;
  remove(): Promise<void>;
}

let seq = 0;
/** Short, unique per process and call: tap names have 15 bytes. */
export function uniqueName(prefix: string): string {
  return `${prefix}${process.pid % 100_000}${(++seq).toString(36)}`;
}

/** A VM directory with a halting kernel, a read-only root and a writable scratch disk (1 MiB each, sparse). */
export async function vmFiles(options: { readonly kernel?: Buffer; readonly tap?: string; readonly name?: string } = {}): Promise<VmFiles> {
  const dir = await mkdtemp("/tmp/imp-fc-");
  const kernel = join(dir, "vmlinux");
  await writeFile(kernel, options.kernel ?? haltKernelElf(), { mode: 0o644 });
  const root = join(dir, "root.ext4");
  const scratch = join(dir, "scratch.ext4");
  for (const disk of [root, scratch]) {
    await writeFile(disk, "", { mode: 0o644 });
    await truncate(disk, 1 << 20);
  }
  const spec: VmSpec = {
    name: options.name ?? uniqueName("fc-test-"),
    dir,
    vcpus: 1,
    memoryMiB: 128,
    kernel,
    cmdline: firecrackerCmdline(["ro", "root=/dev/vda", "init=/.imp/imp-guest", "imp.scratch=/dev/vdb"]),
    drives: [
      { id: "root", path: root, readOnly: true, isRoot: true },
      { id: "scratch", path: scratch, readOnly: false, isRoot: false },
    ],
    ...(options.tap === undefined ? {} : { network: { tap: options.tap, mac: "06:00:ac:10:00:02" } }),
    guestCid: 3,
  };
  return { dir, spec, remove: () => rm(dir, { recursive: true, force: true }) };
}

/** A real tap device, up, optionally owned by `user` and inside network namespace `netns`. */
export async function createTap(name: string, options: { readonly user?: number; readonly netns?: string } = {}): Promise<void> {
  const ns = options.netns === undefined ? [] : ["netns", "exec", options.netns, "ip"];
  const ip = (...args: string[]): Promise<unknown> => run("ip", [...ns, ...args]);
  await ip("tuntap", "add", "dev", name, "mode", "tap", ...(options.user === undefined ? [] : ["user", String(options.user)]));
  await ip("link", "set", name, "up");
}

export async function deleteTap(name: string, options: { readonly netns?: string } = {}): Promise<void> {
  const ns = options.netns === undefined ? [] : ["netns", "exec", options.netns, "ip"];
  await run("ip", [...ns, "tuntap", "del", "dev", name, "mode", "tap"]).catch(() => undefined);
}

/** Whether the tap exists, and whether some process holds it open (carrier is up only then). */
export async function tapState(name: string, options: { readonly netns?: string } = {}): Promise<"absent" | "held" | "free"> {
  const file = `/sys/class/net/${name}/carrier`;
  // `ip netns exec` mounts that namespace's own /sys for the command.
  const [cmd, args] = options.netns === undefined ? ["cat", [file]] : ["ip", ["netns", "exec", options.netns, "cat", file]];
  try {
    const { stdout } = await run(cmd, args);
    return stdout.trim() === "1" ? "held" : "free";
  } catch {
    return "absent";
  }
}

export async function createNetns(name: string): Promise<void> {
  await run("ip", ["netns", "add", name]);
}
export async function deleteNetns(name: string): Promise<void> {
  await run("ip", ["netns", "del", name]).catch(() => undefined);
}
export function netnsExists(name: string): boolean {
  return existsSync(join("/var/run/netns", name));
}

export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export function isSocket(path: string): boolean {
  try {
    return statSync(path).isSocket();
  } catch {
    return false;
  }
}

/** The effective uid of a live process, from /proc. */
export function processUid(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith("Uid:"));
  return Number(line?.split(/\s+/)[2]);
}

/**
 * Wraps a launcher so the process runs in a private mount namespace whose /dev is a fresh tmpfs
 * holding only null, zero, urandom and net/tun, bind-mounted from the host: a machine without KVM, as
 * far as that process can see. `unshare` then `sh` exec, so the pid stays the program's own.
 */
export function withoutKvm(inner: ProcessLauncher): ProcessLauncher {
  const script = [
    "set -eu",
    // Keep handles on the host's nodes before /dev is covered.
    'keep="$(mktemp -d /tmp/imp-nokvm-XXXXXX)"',
    'mount -t tmpfs -o size=64k,mode=0755 keep "$keep"',
    'for n in null zero urandom; do : >"$keep/$n"; mount --bind "/dev/$n" "$keep/$n"; done',
    ': >"$keep/tun"; mount --bind /dev/net/tun "$keep/tun"',
    "mount -t tmpfs -o size=64k,mode=0755 nokvm /dev",
    'for n in null zero urandom; do : >"/dev/$n"; mount --bind "$keep/$n" "/dev/$n"; done',
    'mkdir /dev/net; : >/dev/net/tun; mount --bind "$keep/tun" /dev/net/tun',
    'umount -l "$keep"; rmdir "$keep"',
    'exec "$@"',
  ].join("\n");
  return {
    launch: (request: LaunchRequest): Promise<VmmProcess> =>
      inner.launch({ ...request, binary: "unshare", args: ["--mount", "--propagation", "private", "--", "sh", "-c", script, "sh", request.binary, ...request.args] }),
  };
}
