import type { Command } from "commander";

/** Adds every command group to the program. One line per group; groups live in sibling files. */
export function registerCommands(_program: Command): void {
}
