import type { Command } from "commander";
import { registerAgent } from "./agent.ts";
import { registerCrds } from "./crds.ts";
import { registerDecommission } from "./decommission.ts";
import { registerDev } from "./dev.ts";
import { registerImage } from "./image.ts";
import { registerRun } from "./run.ts";
import { registerOperator } from "./operator.ts";

/** Adds every command group to the program. One line per group; groups live in sibling files. */
export function registerCommands(program: Command): void {
  registerAgent(program);
  registerCrds(program);
  registerDecommission(program);
  registerDev(program);
  registerImage(program);
  registerRun(program);
  registerOperator(program);
}
