/**
 * From the API objects of one VM (the ImpVM, its template, its class, the Secret values its
 * operator sealed to this node) to what this node boots: a pure function, so every rule about what a VM gets is tested
 * without a cluster. Secret values pass through in memory only.
 */
import { parseDurationMs, parseSizeMiB, RESERVED_ENV_PREFIX, templateOf, workloadOf, type ImpVM, type ImpVMClassSpec, type ImpVMTemplateSpec, type Workload } from "../../api/index.ts";
import type { Stored } from "../../kube/index.ts";
import { terminalError } from "../../shared/index.ts";
import { credentialsFromDockerConfig, type CredentialLookup } from "../image/pull/index.ts";
import type { KernelFiles, VmBootRequest, VmCacheRequest } from "../vm/index.ts";
import type { VmmKind } from "../vmm/index.ts";

export type { KernelFiles } from "../vm/index.ts";

export interface VmPlan {
  readonly uid: string;
  readonly name: string;
  readonly namespace: string;
  readonly vcpus: number;
  readonly memoryMiB: number;
  readonly scratchBytes: number;
  readonly image: string;
  readonly extraLayers: readonly string[];
  readonly pullSecretName?: string;
  /** Registry credentials from the pull Secret (opened from the VM's sealed inputs; in memory only). */
  readonly imageCredentials?: CredentialLookup;
  readonly kernel: KernelFiles;
  /** Extra kernel arguments from the template, already split and checked. */
  readonly bootArgs: readonly string[];
  readonly workload: PlannedWorkload;
  /** The workload waits for its sealed one-time setup (`spec.runnerSetup: Required`). */
  readonly requiresSetup: boolean;
  /** How the workload receives it (`spec.runnerSetupDelivery`). */
  readonly setupDelivery: "Environment" | "Stdin";
  readonly egress: "none" | "internet" | "restricted";
  readonly allowedCIDRs: readonly string[];
  readonly expiresAtMs: number;
  readonly preferredVmm?: "qemu" | "firecracker";
  /** The class's `startFrom`: restore a memory snapshot of the node's template where it can. */
  readonly startFrom: "Boot" | "Snapshot";
  /** The VM's cache volume (`spec.cache`), in the VM's namespace. */
  readonly cache?: VmCacheRequest;
}

export interface PlannedWorkload {
  readonly argv: readonly string[];
  /** Literal variables and those read from Secrets. Secret: never log. */
  readonly env: Readonly<Record<string, string>>;
  readonly cwd?: string;
  readonly uid?: number;
  readonly gid?: number;
}

export interface PlanInputs {
  readonly vm: Readonly<Stored<ImpVM>>;
  /** The referenced template's spec, or undefined for an inline template. */
  readonly template: Readonly<ImpVMTemplateSpec> | undefined;
  readonly vmClass: Readonly<ImpVMClassSpec>;
  /** Secret data by Secret name (values decoded, opened from the VM's sealed inputs), for env valueFrom and envFrom. */
  readonly secrets: ReadonlyMap<string, Readonly<Record<string, string>>>;
  readonly kernels: ReadonlyMap<string, KernelFiles>;
  /** Base environment every workload gets (PATH etc.), below the workload's own. */
  readonly baseEnv: Readonly<Record<string, string>>;
}

const SAFE_BOOT_ARG = /^[\x21-\x7e]+$/;
/** Kernel arguments a template may not set: they decide the root, init and the agent's own channel. */
const RESERVED_BOOT_ARGS = /^(root|rootfstype|rootflags|init|rdinit|imp\.[a-z_.]+|console|panic|reboot)(=|$)/;

export function planVm(inputs: PlanInputs): VmPlan {
  const { vm } = inputs;
  const where = `VM ${vm.metadata.namespace}/${vm.metadata.name}`;
  const template = templateOf(vm, inputs.template);
  const workload = workloadOf(vm, template);
  const kernel = inputs.kernels.get(template.kernel);
  if (kernel === undefined) {
    throw terminalError("KernelNotConfigured", `Cannot plan ${where}: this node has no kernel named "${template.kernel}" (configured: ${[...inputs.kernels.keys()].join(", ") || "none"})`);
  }
  const bootArgs = (template.bootArgs ?? "").split(" ").filter((a) => a !== "");
  for (const arg of bootArgs) {
    if (!SAFE_BOOT_ARG.test(arg) || RESERVED_BOOT_ARGS.test(arg)) throw terminalError("BootArgRefused", `Cannot plan ${where}: boot argument "${arg}" is reserved for Imp or not printable ASCII`);
  }
  const uid = vm.metadata.uid;
  const created = Date.parse(vm.metadata.creationTimestamp ?? "");
  return {
    uid,
    name: vm.metadata.name,
    namespace: vm.metadata.namespace ?? "default",
    vcpus: inputs.vmClass.vcpu,
    memoryMiB: inputs.vmClass.memoryMiB,
    scratchBytes: parseSizeMiB(inputs.vmClass.scratchDisk) * 1024 * 1024,
    image: template.image,
    extraLayers: (template.extraLayers ?? []).map((l) => l.image),
    ...(template.imagePullSecretRef === undefined ? {} : { pullSecretName: template.imagePullSecretRef.name }),
    kernel,
    bootArgs,
    workload: plannedWorkload(workload, inputs.secrets, inputs.baseEnv, where),
    requiresSetup: vm.spec.runnerSetup === "Required",
    setupDelivery: vm.spec.runnerSetupDelivery ?? "Environment",
    egress: template.network?.egress ?? "internet",
    allowedCIDRs: template.network?.allowedCIDRs ?? [],
    expiresAtMs: (Number.isNaN(created) ? 0 : created) + parseDurationMs(template.expireAfter),
    ...(inputs.vmClass.preferredVmm === undefined ? {} : { preferredVmm: inputs.vmClass.preferredVmm }),
    startFrom: inputs.vmClass.startFrom ?? "Boot",
    ...(vm.spec.cache === undefined
      ? {}
      : { cache: { namespace: vm.metadata.namespace ?? "default", volume: vm.spec.cache.volume, sizeBytes: parseSizeMiB(vm.spec.cache.size) * 1024 * 1024, paths: [...vm.spec.cache.paths] } }),
  };
}

function plannedWorkload(workload: Readonly<Workload>, secrets: PlanInputs["secrets"], baseEnv: PlanInputs["baseEnv"], where: string): PlannedWorkload {
  const env: Record<string, string> = { ...baseEnv };
  for (const from of workload.envFrom ?? []) {
    const data = secrets.get(from.secretRef.name);
    if (data === undefined) throw terminalError("SecretNotFound", `Cannot plan ${where}: envFrom Secret ${from.secretRef.name} does not exist`);
    for (const [key, value] of Object.entries(data)) env[`${from.prefix ?? ""}${key}`] = value;
  }
  for (const e of workload.env ?? []) {
    if (e.value !== undefined) {
      env[e.name] = e.value;
      continue;
    }
    const ref = e.valueFrom?.secretKeyRef;
    const value = ref === undefined ? undefined : secrets.get(ref.name)?.[ref.key];
    if (value === undefined) throw terminalError("SecretNotFound", `Cannot plan ${where}: env ${e.name} reads key ${ref?.key ?? "?"} of Secret ${ref?.name ?? "?"}, which does not exist`);
    env[e.name] = value;
  }
  for (const name of Object.keys(env)) {
    if (name.startsWith(RESERVED_ENV_PREFIX)) throw terminalError("ReservedEnv", `Cannot plan ${where}: variable ${name} uses the reserved IMP_ prefix`);
  }
  return { argv: workload.command, env, ...(workload.workingDir === undefined ? {} : { cwd: workload.workingDir }), ...userOf(workload.user, where) };
}

/** `uid[:gid]` only: names would need the image's /etc/passwd, which the host does not read. */
function userOf(user: string | undefined, where: string): { uid?: number; gid?: number } {
  if (user === undefined || user === "root" || user === "0") return {};
  const m = /^(\d+)(?::(\d+))?$/.exec(user);
  if (m === null) throw terminalError("UserNotNumeric", `Cannot plan ${where}: user "${user}" must be uid or uid:gid here (names need the image's passwd file)`);
  const uid = Number(m[1]);
  return { uid, gid: m[2] === undefined ? uid : Number(m[2]) };
}

/** What the boot pipeline needs of a plan, once the node chose the VMM. */
export function bootRequestOf(plan: VmPlan, vmm: VmmKind): VmBootRequest {
  return {
    id: plan.uid,
    name: plan.name,
    vmm,
    vcpus: plan.vcpus,
    memoryMiB: plan.memoryMiB,
    scratchBytes: plan.scratchBytes,
    image: { image: plan.image, extraLayers: plan.extraLayers, ...(plan.imageCredentials === undefined ? {} : { credentials: plan.imageCredentials }) },
    kernel: plan.kernel,
    bootArgs: plan.bootArgs,
    ...(plan.egress === "none" ? {} : { network: { egress: plan.egress, allowedCIDRs: plan.allowedCIDRs } }),
    requiresSetup: plan.requiresSetup,
    setupDelivery: plan.setupDelivery,
    workload: plan.workload,
    // A memory snapshot's devices are its template's, which has no cache disk: a VM with a cache
    // volume boots (docs/caches.md).
    startFrom: plan.cache === undefined ? plan.startFrom : "Boot",
    ...(plan.cache === undefined ? {} : { cache: plan.cache }),
  };
}

/**
 * The plan with its registry credentials, from the pull Secret's decoded `.dockerconfigjson` among
 * the VM's opened inputs. A pull Secret that is missing or of another type fails the plan.
 */
export function withImageCredentials(plan: VmPlan, secrets: PlanInputs["secrets"]): VmPlan {
  if (plan.pullSecretName === undefined) return plan;
  const data = secrets.get(plan.pullSecretName);
  if (data === undefined) throw terminalError("PlanInputNotFound", `Cannot plan the VM: image pull Secret ${plan.pullSecretName} does not exist`);
  const config = data[".dockerconfigjson"];
  if (config === undefined) throw terminalError("InvalidPullSecret", `Cannot read registry credentials: Secret ${plan.pullSecretName} has no .dockerconfigjson key (type kubernetes.io/dockerconfigjson expected)`);
  return { ...plan, imageCredentials: credentialsFromDockerConfig(config) };
}
