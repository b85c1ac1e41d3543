/** Every kind's definition, in install order. Internal to src/api; the public entry re-exports. */
import type { KindDefinition } from "./kind.ts";
import { impVMClassDefinition } from "./impvmclass.ts";
import { impVMTemplateDefinition } from "./impvmtemplate.ts";
import { impVMDefinition } from "./impvm.ts";
import { impVMRunnerPoolDefinition } from "./impvmrunnerpool.ts";
import { impNodeDefinition } from "./impnode.ts";

export const KIND_DEFINITIONS: readonly KindDefinition[] = [
  impVMClassDefinition,
  impVMTemplateDefinition,
  impVMDefinition,
  impVMRunnerPoolDefinition,
  impNodeDefinition,
];
