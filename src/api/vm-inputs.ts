/**
 * A VM's Secret inputs: the values its environment (`env[].valueFrom.secretKeyRef`, `envFrom`) and
 * its template's image pull (`imagePullSecretRef`) read. A node agent cannot read Secrets (a node a
 * job escaped to must not reach the forge credentials or another tenant's Secrets; docs/install.md,
 * "A compromised node"), so the operator reads exactly these, seals them to the VM's node with the
 * VM uid as associated data (purpose `inputs`), and the agent opens them in memory. The names are
 * computed here, once, for both sides.
 */
import { terminalError } from "../shared/index.ts";
import type { ImpVM } from "./schema/impvm.ts";
import type { Workload } from "./schema/common.ts";
import type { ImpVMTemplateSpec } from "./schema/impvmtemplate.ts";

type VmLike = Pick<ImpVM, "spec"> & { readonly metadata: { readonly name?: string | undefined; readonly namespace?: string | undefined } };

/** The template the VM runs: its inline template, or the referenced one (`undefined` when missing). */
export function templateOf(vm: Readonly<VmLike>, referenced: Readonly<ImpVMTemplateSpec> | undefined): Readonly<ImpVMTemplateSpec> {
  const template = vm.spec.template ?? referenced;
  if (template === undefined) {
    throw terminalError("TemplateNotFound", `Cannot plan VM ${vm.metadata.namespace ?? ""}/${vm.metadata.name ?? ""}: template ${vm.spec.templateRef?.name ?? "(none)"} does not exist`);
  }
  return template;
}

export function workloadOf(vm: Readonly<VmLike>, template: Readonly<ImpVMTemplateSpec>): Readonly<Workload> {
  const workload = vm.spec.workload ?? template.workload;
  if (workload === undefined) throw terminalError("NoWorkload", `Cannot plan VM ${vm.metadata.name ?? ""}: neither the VM nor its template has a workload`);
  return workload;
}

/** Which keys of which Secrets (in the VM's namespace) the VM reads; `"*"` means every key. */
export type SecretKeysNeeded = ReadonlyMap<string, ReadonlySet<string> | "*">;

/** The Secret keys a VM reads (environment and image pull), so exactly those are sealed to its node. */
export function secretKeysNeeded(vm: Readonly<VmLike>, template: Readonly<ImpVMTemplateSpec>): SecretKeysNeeded {
  const needed = new Map<string, Set<string> | "*">();
  const all = (name: string): void => void needed.set(name, "*");
  const key = (name: string, k: string): void => {
    const have = needed.get(name);
    if (have === "*") return;
    needed.set(name, new Set([...(have ?? []), k]));
  };
  const workload = vm.spec.workload ?? template.workload;
  for (const e of workload?.env ?? []) if (e.valueFrom !== undefined) key(e.valueFrom.secretKeyRef.name, e.valueFrom.secretKeyRef.key);
  for (const f of workload?.envFrom ?? []) all(f.secretRef.name);
  if (template.imagePullSecretRef !== undefined) all(template.imagePullSecretRef.name);
  return needed;
}

/** The plaintext of a sealed `inputs` envelope. Secret: never logged, never on disk. */
export interface VmInputs {
  readonly v: 1;
  /** Decoded Secret data by Secret name, only the keys the VM reads; a Secret that does not exist is absent. */
  readonly secrets: Readonly<Record<string, Readonly<Record<string, string>>>>;
}

/** Picks what the VM reads from the Secrets found (decoded data by name); missing Secrets and keys are left out. */
export function vmInputsFrom(needed: SecretKeysNeeded, found: ReadonlyMap<string, Readonly<Record<string, string>>>): VmInputs {
  const secrets: Record<string, Record<string, string>> = {};
  for (const [name, keys] of needed) {
    const data = found.get(name);
    if (data === undefined) continue;
    secrets[name] = keys === "*" ? { ...data } : Object.fromEntries(Object.entries(data).filter(([k]) => keys.has(k)));
  }
  return { v: 1, secrets };
}

/** Parses opened inputs; anything not of this shape is a terminal SetupSealedInvalid. */
export function parseVmInputs(plaintext: string): VmInputs {
  let value: unknown;
  try {
    value = JSON.parse(plaintext);
  } catch {
    throw terminalError("SetupSealedInvalid", "Cannot read the VM's sealed inputs: not JSON");
  }
  const v = value as { v?: unknown; secrets?: unknown };
  const ok =
    typeof value === "object" && value !== null && v.v === 1 && typeof v.secrets === "object" && v.secrets !== null &&
    Object.values(v.secrets).every((data) => typeof data === "object" && data !== null && Object.values(data as object).every((x) => typeof x === "string"));
  if (!ok) throw terminalError("SetupSealedInvalid", "Cannot read the VM's sealed inputs: not a version 1 map of Secret data");
  return value as VmInputs;
}
