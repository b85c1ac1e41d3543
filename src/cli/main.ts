/**
 * The `imp` command. Each command group lives in its own file under ./commands and registers itself
 * on the program; this file only wires them up and turns errors into exit codes.
 */
import { Command } from "commander";
import { describeError } from "../shared/index.ts";
import { registerCommands } from "./commands/index.ts";

const program = new Command("imp").description("Imp: untrusted CI jobs in short-lived microVMs").showHelpAfterError();
registerCommands(program);

try {
  await program.parseAsync(process.argv);
} catch (err) {
  process.stderr.write(`imp: ${describeError(err)}\n`);
  process.exitCode = 1;
}
