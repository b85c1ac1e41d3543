import { readFile } from "node:fs/promises";
import type { Command } from "commander";
import { DEFAULT_HEALTH_PORT } from "../../kube/index.ts";
import { DEFAULT_AGENT_LEASE_NAMESPACE, DEFAULT_WEBHOOK_PORT, Operator } from "../../operator/index.ts";
import { createLogger, terminalError } from "../../shared/index.ts";
import { loadKubeConfig, port, seconds } from "./flag-values.ts";
import { faultPointsFromEnvironment } from "../environment.ts";

interface OperatorFlags {
  kubeconfig?: string;
  namespace?: string;
  leaseNamespace?: string;
  agentLeaseNamespace: string;
  webhookPort?: string;
  webhookSecretFile: string[];
  healthPort: string;
  healthHost: string;
  githubUrl?: string;
  demandListInterval: string;
  scaleSetConflictRetry: string;
  queueListInterval: string;
  leaderElection: boolean;
  logLevel: string;
}

/** `imp operator`: the operator (one leader among its replicas). Runs until SIGTERM/SIGINT. */
export function registerOperator(program: Command): void {
  program
    .command("operator")
    .description("run the operator: runner pools (GitHub, Gitea), one-time runner setups sealed to nodes, registration cleanup, scale-set listeners, webhooks")
    .option("--kubeconfig <file>", "kubeconfig; default: $KUBECONFIG, else ~/.kube/config, else the pod's in-cluster account")
    .option("--namespace <ns>", "watch only this namespace's pools and VMs (default: all)")
    .option("--lease-namespace <ns>", "namespace of the leader-election Lease (default: --namespace, else default)")
    .option("--agent-lease-namespace <ns>", "namespace of the node agents' liveness Leases (the agents' leaseNamespace)", DEFAULT_AGENT_LEASE_NAMESPACE)
    .option("--webhook-port <port>", `serve the forges' workflow_job webhooks on this port (POST /webhooks/github, POST /webhooks/gitea; e.g. ${DEFAULT_WEBHOOK_PORT}); off when not given`)
    .option("--webhook-secret-file <file>", "file holding the GitHub App's webhook secret, trusted for every GitHub pool (never for Gitea's); give twice while rotating (pools may name their own: spec.webhook.secretRef)", (v: string, acc: string[]) => [...acc, v], [] as string[])
    .option("--health-port <port>", "health, readiness and metrics port", String(DEFAULT_HEALTH_PORT))
    .option("--health-host <address>", "address the health, readiness and metrics server listens on (0.0.0.0 in a Pod)", "127.0.0.1")
    .option("--github-url <url>", "GitHub REST API base URL for every pool (overrides spec.github.apiURL)")
    .option("--demand-list-interval <seconds>", "how often a webhook pool lists the jobs waiting on its forge: the most a lost webhook delays a job", "30")
    .option("--queue-list-interval <seconds>", "how often a Gitea pool without webhook lists the jobs waiting on Gitea (its demand)", "5")
    .option("--scale-set-conflict-retry <seconds>", "how often a scale-set pool's listener retries while another session holds its scale set (a crashed operator's session lives until GitHub expires it)", "30")
    .option("--no-leader-election", "run without a Lease (a single replica only)")
    .option("--log-level <level>", "debug | info | warn | error", "info")
    .action(async (opts: OperatorFlags) => {
      const logger = createLogger({ level: opts.logLevel, name: "imp-operator" });
      const kubeConfig = loadKubeConfig(opts.kubeconfig);
      if (opts.webhookSecretFile.length > 2) throw terminalError("InvalidFlag", "Cannot use more than two --webhook-secret-file: one secret, or two while rotating");
      const webhookSecrets = await Promise.all(opts.webhookSecretFile.map(async (f) => (await readFile(f, "utf8")).trim()));
      const operator = new Operator({
        kubeConfig,
        logger,
        ...(opts.namespace === undefined ? {} : { namespace: opts.namespace }),
        ...(opts.leaseNamespace === undefined ? {} : { leaseNamespace: opts.leaseNamespace }),
        agentLeaseNamespace: opts.agentLeaseNamespace,
        leaderElection: opts.leaderElection,
        healthPort: port(opts.healthPort, "--health-port"),
        healthHost: opts.healthHost,
        ...(opts.webhookPort === undefined ? {} : { webhookPort: port(opts.webhookPort, "--webhook-port"), webhookSecrets }),
        ...(opts.githubUrl === undefined ? {} : { githubUrl: opts.githubUrl }),
        demandListIntervalMs: seconds(opts.demandListInterval, "--demand-list-interval") * 1000,
        scaleSetConflictRetryMs: seconds(opts.scaleSetConflictRetry, "--scale-set-conflict-retry") * 1000,
        queueListIntervalMs: seconds(opts.queueListInterval, "--queue-list-interval") * 1000,
        faults: faultPointsFromEnvironment(logger),
      });
      const stop = new AbortController();
      const onSignal = (): void => stop.abort(new Error("signal"));
      process.once("SIGINT", onSignal).once("SIGTERM", onSignal);
      logger.info({ namespace: opts.namespace ?? "(all)" }, "operator starting");
      await operator.start(stop.signal);
      logger.info("operator stopped");
    });
}
