/**
 * Whether this node can run fast (hardware-virtualised) VMs is MEASURED, never inferred from
 * `/dev/kvm` existing: a nested PVM host (`kvm_pvm` module) offers a `/dev/kvm` on which QEMU's
 * `-cpu host` aborts while resetting the vCPUs ("failed to set MSR 0x10a"), and on which unmodified
 * guest kernels would run instruction-emulated about 1000x slower anyway.
 *
 * The probe boots nothing. It (1) opens `/dev/kvm` read-write, (2) looks for `/sys/module/kvm_pvm`,
 * (3) starts `qemu-system-x86_64 -accel kvm -cpu host -M microvm -S` with its QMP monitor on stdio and
 * asks `query-status`. `-S` keeps the vCPUs stopped, so no guest code runs; but QEMU answers QMP
 * commands only once machine creation is done, which includes creating the vCPUs under KVM and
 * writing their registers and MSRs (where the PVM abort happens). So an answer ("prelaunch") is a
 * positive signal, not a guess from "it did not die within N ms". Measured on a PVM host: QEMU prints
 * the QMP greeting, then aborts before answering, ~40 ms after spawn.
 *
 * Observe ({@link measureKvmFacts}) → pure decide ({@link decideAccel}) → the caller acts.
 */
import { open } from "node:fs/promises";
import { existsSync } from "node:fs";
import { assertExecutable, Child, describeError, describeExit, type ChildExit } from "../../shared/index.ts";

/** Node configuration: measure, or force one accelerator. */
export type AccelMode = "auto" | "kvm" | "tcg";
export type Accel = "kvm" | "tcg";

/** What QEMU did when asked to create a KVM machine with its vCPUs stopped. */
export type QemuKvmCheck =
  /** QEMU finished creating the machine under KVM and answered QMP `query-status`. */
  | { readonly outcome: "ready"; readonly ms: number }
  /** QEMU exited before answering; `detail` carries its last stderr lines. */
  | { readonly outcome: "exited"; readonly ms: number; readonly detail: string }
  /** No answer within the bound; QEMU was killed. */
  | { readonly outcome: "timeout"; readonly ms: number; readonly detail: string }
  /** Not attempted (no usable device, no QEMU binary). */
  | { readonly outcome: "not-run"; readonly detail: string };

/** Observed facts, the only input of {@link decideAccel}. */
export interface KvmFacts {
  readonly deviceExists: boolean;
  /** `/dev/kvm` opened read-write (false when it does not exist). */
  readonly deviceOpenable: boolean;
  readonly deviceError?: string;
  /** `/sys/module/kvm_pvm` exists: KVM is PVM's, which runs only PVM-enlightened guest kernels fast. */
  readonly pvm: boolean;
  readonly qemu: QemuKvmCheck;
}

export interface KvmCapability {
  /** Measured: KVM is usable for fast VMs here (independent of any forcing). */
  readonly kvm: boolean;
  readonly deviceExists: boolean;
  readonly pvm: boolean;
  /** What VMs on this node should use: the measurement under "auto", else the forced choice. */
  readonly accel: Accel;
  /** One sentence a person can read. */
  readonly reason: string;
}

/** Pure: the accelerator for `mode` given `facts`, and why. */
export function decideAccel(facts: KvmFacts, mode: AccelMode): KvmCapability {
  const { usable, why } = kvmUsable(facts);
  const base = { kvm: usable, deviceExists: facts.deviceExists, pvm: facts.pvm };
  switch (mode) {
    case "kvm":
      return { ...base, accel: "kvm", reason: `KVM forced by node configuration (measured: ${why})` };
    case "tcg":
      return { ...base, accel: "tcg", reason: `TCG forced by node configuration (measured: ${why})` };
    case "auto":
      return { ...base, accel: usable ? "kvm" : "tcg", reason: usable ? why : `TCG (software emulation): ${why}` };
  }
}

function kvmUsable(facts: KvmFacts): { usable: boolean; why: string } {
  if (!facts.deviceExists) return { usable: false, why: "/dev/kvm does not exist" };
  if (!facts.deviceOpenable) return { usable: false, why: `/dev/kvm cannot be opened read-write (${facts.deviceError ?? "unknown error"})` };
  const qemu = facts.qemu;
  if (facts.pvm) {
    const seen = qemu.outcome === "ready" ? "QEMU could create a KVM machine" : `QEMU -cpu host ${qemuOutcomeText(qemu)}`;
    return { usable: false, why: `/dev/kvm belongs to the nested PVM module kvm_pvm, which runs unmodified guest kernels instruction-emulated (~1000x slower); ${seen}` };
  }
  if (qemu.outcome === "ready") return { usable: true, why: `KVM usable: QEMU created a KVM machine with -cpu host in ${Math.round(qemu.ms)} ms` };
  return { usable: false, why: `/dev/kvm exists but QEMU -accel kvm -cpu host ${qemuOutcomeText(qemu)}` };
}

function qemuOutcomeText(qemu: QemuKvmCheck): string {
  switch (qemu.outcome) {
    case "ready":
      return "works";
    case "exited":
      return `exited before the guest ran (${qemu.detail})`;
    case "timeout":
      return `gave no answer (${qemu.detail})`;
    case "not-run":
      return `was not tried (${qemu.detail})`;
  }
}

export interface KvmProbeOptions {
  readonly mode?: AccelMode;
  readonly qemuBinary?: string;
  /** Bound of the QEMU check; it normally answers in well under a second. */
  readonly timeoutMs?: number;
  readonly devicePath?: string;
  readonly pvmModulePath?: string;
}

export interface KvmProbeResult extends KvmCapability {
  readonly facts: KvmFacts;
  /** How long the whole probe took. */
  readonly ms: number;
}

/** Measures this node and decides. Never throws for what it finds; bounded by `timeoutMs` (+ kill). */
export async function probeKvm(options: KvmProbeOptions = {}): Promise<KvmProbeResult> {
  const started = performance.now();
  const facts = await measureKvmFacts(options);
  return { ...decideAccel(facts, options.mode ?? "auto"), facts, ms: performance.now() - started };
}

export async function measureKvmFacts(options: KvmProbeOptions = {}): Promise<KvmFacts> {
  const devicePath = options.devicePath ?? "/dev/kvm";
  const pvm = existsSync(options.pvmModulePath ?? "/sys/module/kvm_pvm");
  let deviceExists = true;
  let deviceOpenable = false;
  let deviceError: string | undefined;
  try {
    const handle = await open(devicePath, "r+");
    await handle.close();
    deviceOpenable = true;
  } catch (err) {
    deviceExists = (err as NodeJS.ErrnoException).code !== "ENOENT";
    deviceError = describeError(err);
  }
  const qemu: QemuKvmCheck = deviceOpenable
    ? await checkQemuKvm({ qemuBinary: options.qemuBinary ?? "qemu-system-x86_64", timeoutMs: options.timeoutMs ?? 10_000 })
    : { outcome: "not-run", detail: `${devicePath} is not usable` };
  return { deviceExists, deviceOpenable, pvm, qemu, ...(deviceError === undefined ? {} : { deviceError }) };
}

/**
 * Starts QEMU on KVM with stopped vCPUs and waits (bounded) for its QMP `query-status` answer, then
 * kills it. Exported for tests, which point `qemuBinary` at stand-ins.
 */
export async function checkQemuKvm(options: { readonly qemuBinary: string; readonly timeoutMs: number }): Promise<QemuKvmCheck> {
  try {
    await assertExecutable("qemu", options.qemuBinary);
  } catch (err) {
    return { outcome: "not-run", detail: describeError(err) };
  }
  const started = performance.now();
  const args = ["-accel", "kvm", "-cpu", "host", "-M", "microvm", "-nodefaults", "-no-user-config", "-S", "-display", "none", "-qmp", "stdio"];
  const qemu = new Child("qemu kvm probe", options.qemuBinary, args, { stdio: ["pipe", "pipe", "pipe"], dieWithParent: true, spawnErrorCode: "VmmSpawnFailed" });
  let stderr = "";
  qemu.process.stderr?.on("data", (chunk: Buffer) => {
    stderr = (stderr + chunk.toString("utf8")).slice(-4096);
  });
  qemu.process.stdin?.on("error", () => undefined); // QEMU may exit before reading what we wrote
  const answered = new Promise<boolean>((resolve) => {
    let buffer = "";
    qemu.process.stdout?.on("data", (chunk: Buffer) => {
      buffer = (buffer + chunk.toString("utf8")).slice(-65536);
      if (/"status"\s*:\s*"(prelaunch|paused)"/.test(buffer)) resolve(true);
    });
    void qemu.exited().then(() => resolve(false));
  });
  // QMP accepts commands before it has greeted; it executes them once the main loop runs.
  qemu.process.stdin?.end('{"execute":"qmp_capabilities"}\n{"execute":"query-status"}\n');
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<"timeout">((resolve) => {
    timer = setTimeout(() => resolve("timeout"), options.timeoutMs);
  });
  try {
    const result = await Promise.race([answered, timedOut]);
    const ms = performance.now() - started;
    if (result === true) return { outcome: "ready", ms };
    if (result === "timeout") return { outcome: "timeout", ms, detail: `no QMP answer within ${options.timeoutMs} ms` };
    return { outcome: "exited", ms, detail: exitDetail(await qemu.exited(), stderr) };
  } finally {
    clearTimeout(timer);
    await qemu.stop(1_000);
  }
}

function exitDetail(exit: ChildExit, stderr: string): string {
  const lines = stderr.trim().split("\n").filter(Boolean).slice(-2).join(" | ");
  return lines === "" ? describeExit(exit) : `${describeExit(exit)}: ${lines}`;
}
