/**
 * What an ImpVM asks of a node: its class's vCPUs and memory (through its inline template or
 * templateRef), one VM slot, the class's architecture, the template's kernel name, and for runner
 * VMs (label imp.dev/pool) a node setup key to seal the one-time runner setup to.
 */
import { LABELS, type ImpVM, type ImpVMClass, type ImpVMTemplate, type ImpVMTemplateSpec } from "../../api/index.ts";
import type { DeepReadonly } from "../../kube/index.ts";

export interface Resources {
  readonly vcpu: number;
  readonly memoryMiB: number;
  readonly vmSlots: number;
}

export interface VmRequest extends Resources {
  readonly arch: string;
  readonly kernel: string;
  readonly needsSetupKey: boolean;
}

export type RequestResult = { readonly ok: true; readonly request: VmRequest } | { readonly ok: false; readonly message: string };

export interface RequestLookups {
  /** The ImpVMTemplate `name` in `namespace`, from a cache. */
  readonly template: (namespace: string, name: string) => DeepReadonly<ImpVMTemplate> | undefined;
  /** The ImpVMClass `name`, from a cache. */
  readonly vmClass: (name: string) => DeepReadonly<ImpVMClass> | undefined;
}

export const DEFAULT_KERNEL = "default";

export function templateSpecOf(vm: DeepReadonly<ImpVM>, lookups: RequestLookups): DeepReadonly<ImpVMTemplateSpec> | string {
  if (vm.spec.template !== undefined) return vm.spec.template;
  const ref = vm.spec.templateRef?.name;
  if (ref === undefined) return "it has neither template nor templateRef";
  const namespace = vm.metadata.namespace ?? "";
  const template = lookups.template(namespace, ref);
  return template === undefined ? `ImpVMTemplate ${namespace}/${ref} not found` : template.spec;
}

export function resolveRequest(vm: DeepReadonly<ImpVM>, lookups: RequestLookups): RequestResult {
  const template = templateSpecOf(vm, lookups);
  if (typeof template === "string") return { ok: false, message: template };
  const className = template.classRef.name;
  const vmClass = lookups.vmClass(className);
  if (vmClass === undefined) return { ok: false, message: `ImpVMClass ${className} not found` };
  return {
    ok: true,
    request: {
      vcpu: vmClass.spec.vcpu,
      memoryMiB: vmClass.spec.memoryMiB,
      vmSlots: 1,
      arch: vmClass.spec.arch ?? "amd64",
      kernel: template.kernel ?? DEFAULT_KERNEL,
      needsSetupKey: vm.metadata.labels?.[LABELS.pool] !== undefined,
    },
  };
}
