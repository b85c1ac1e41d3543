import { join } from "node:path";
import type { Command } from "commander";
import { cacheDir, clusterDown, clusterStatus, clusterUp } from "../../devcluster/index.ts";

const defaultDir = (): string => join(cacheDir(), "dev-cluster");

/** `imp dev cluster up|down|status`: a real local control plane for people (tests use the library directly). */
export function registerDev(program: Command): void {
  const cluster = program.command("dev").description("local development helpers").command("cluster").description("a local etcd + kube-apiserver + kube-controller-manager");
  cluster
    .command("up")
    .description("start the control plane in the background and print its kubeconfig path")
    .option("--dir <dir>", "state directory", defaultDir())
    .action(async (opts: { dir: string }) => {
      // Ctrl-C while starting must not leave detached processes behind: abort, and the start unwinds.
      const interrupted = new AbortController();
      const onSignal = (): void => interrupted.abort(new Error("interrupted"));
      process.once("SIGINT", onSignal).once("SIGTERM", onSignal);
      const state = await clusterUp(opts.dir, interrupted.signal).finally(() => {
        process.off("SIGINT", onSignal).off("SIGTERM", onSignal);
      });
      process.stdout.write(
        `control plane ready in ${(state.startupMs / 1000).toFixed(1)} s at ${state.server}\n` +
          `export KUBECONFIG=${state.kubeconfigPath}\n`,
      );
    });
  cluster
    .command("down")
    .description("stop the control plane and remove its state")
    .option("--dir <dir>", "state directory", defaultDir())
    .action(async (opts: { dir: string }) => {
      const { stopped } = await clusterDown(opts.dir);
      process.stdout.write(stopped.length === 0 ? "no dev cluster was running\n" : `stopped ${stopped.join(", ")}\n`);
    });
  cluster
    .command("status")
    .description("show whether the control plane is running")
    .option("--dir <dir>", "state directory", defaultDir())
    .action(async (opts: { dir: string }) => {
      const status = await clusterStatus(opts.dir);
      if (status === undefined) {
        process.stdout.write("no dev cluster\n");
        return;
      }
      for (const [name, up] of Object.entries(status.running)) process.stdout.write(`${name.padEnd(24)} ${up ? "running" : "stopped"}\n`);
      process.stdout.write(`KUBECONFIG=${status.kubeconfigPath}\n`);
    });
}
