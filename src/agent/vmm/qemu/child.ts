import { assertExecutable as assertExecutableAs } from "../../../shared/index.ts";

export { describeExit, type ChildExit } from "../../../shared/index.ts";

/** The shared executable check with the VMM's error code. */
export const assertExecutable = (name: string, command: string): Promise<void> => assertExecutableAs(name, command, "VmmSpawnFailed");
