import { assertExecutable as assertExecutableAs, Child as SharedChild, type ChildOptions } from "../../../shared/index.ts";

export { describeExit, type ChildExit } from "../../../shared/index.ts";

/** The VMM's helper processes: the shared Child, with spawn failures reported as `vmm.spawn_failed`. */
export class Child extends SharedChild {
  constructor(name: string, command: string, args: readonly string[], options: Omit<ChildOptions, "spawnErrorCode">) {
    super(name, command, args, { ...options, spawnErrorCode: "vmm.spawn_failed" });
  }
}

/** {@link assertExecutableAs} with the VMM's error code. */
export const assertExecutable = (name: string, command: string): Promise<void> => assertExecutableAs(name, command, "vmm.spawn_failed");
