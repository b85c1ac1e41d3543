import type { Command } from "commander";
import { createNodeAgent, loadAgentConfig } from "../../agent/index.ts";
import { createLogger } from "../../shared/index.ts";
import { faultPointsFromEnvironment } from "../environment.ts";
import { loadKubeConfig } from "./flag-values.ts";

/** `imp agent`: the node agent (one per node, usually a DaemonSet). Runs until SIGTERM/SIGINT. */
export function registerAgent(program: Command): void {
  program
    .command("agent")
    .description("run the node agent: boots the ImpVMs bound to this node (NODE_NAME) and reports the node")
    .requiredOption("--config <file>", "agent config (YAML, see docs/agent.md)")
    .option("--kubeconfig <file>", "kubeconfig; default: $KUBECONFIG, else ~/.kube/config, else the pod's in-cluster account")
    .option("--log-level <level>", "debug | info | warn | error", "info")
    .action(async (opts: { config: string; kubeconfig?: string; logLevel: string }) => {
      const logger = createLogger({ level: opts.logLevel, name: "imp-agent" });
      const kubeConfig = loadKubeConfig(opts.kubeconfig);
      const config = await loadAgentConfig(opts.config, process.env);
      const agent = await createNodeAgent({ config, kubeConfig, logger, faults: faultPointsFromEnvironment(logger.child({ node: config.nodeName })) });
      const stop = new AbortController();
      // VMs keep running: a restarted agent re-adopts them.
      const onSignal = (): void => stop.abort(new Error("signal"));
      process.once("SIGINT", onSignal).once("SIGTERM", onSignal);
      logger.info({ node: config.nodeName }, "agent starting");
      await agent.start(stop.signal);
      logger.info("agent stopped");
      // Exit now, not when the event loop drains: the connections to running VMs (their supervisors'
      // sockets, guest channels) stay open by design, the VMs keep running, and the next agent
      // reconnects. Waiting for them kept a stopping agent Pod alive until its grace period's SIGKILL.
      process.exit(0);
    });
}
