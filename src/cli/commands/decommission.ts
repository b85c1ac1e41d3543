import type { Command } from "commander";
import { IMP_NODES, IMP_VM_RUNNER_POOLS, IMP_VMS, type ImpNode, type ImpVM, type ImpVMRunnerPool } from "../../api/index.ts";
import { createResourceClient, LEASE_RESOURCE, type Lease } from "../../kube/index.ts";
import { DEFAULT_AGENT_LEASE_NAMESPACE, decommission } from "../../operator/index.ts";
import { createLogger, systemClock } from "../../shared/index.ts";
import { loadKubeConfig, seconds } from "./flag-values.ts";

interface DecommissionFlags {
  kubeconfig?: string;
  namespace?: string;
  agentLeaseNamespace: string;
  keepNodeState: boolean;
  vmTimeout: string;
  nodeTimeout: string;
  logLevel: string;
}

/** `imp decommission`: ends every pool and VM and retires every node before Imp is uninstalled (the chart's pre-delete hook). */
export function registerDecommission(program: Command): void {
  program
    .command("decommission")
    .description("before uninstalling Imp: delete every pool and VM (running jobs are cancelled), wait until they are gone, then have each node's agent remove its state, Lease and ImpNode")
    .option("--kubeconfig <file>", "kubeconfig; default: $KUBECONFIG, else ~/.kube/config, else the pod's in-cluster account")
    .option("--namespace <ns>", "only this namespace's pools and VMs (default: all)")
    .option("--agent-lease-namespace <ns>", "namespace of the node agents' liveness Leases", DEFAULT_AGENT_LEASE_NAMESPACE)
    .option("--keep-node-state", "agents keep their state directory (image cache, setup key) for a later install", false)
    .option("--vm-timeout <seconds>", "how long pools and VMs may take to go before this fails", "180")
    .option("--node-timeout <seconds>", "how long agents may take to retire their node before its ImpNode is deleted here", "60")
    .option("--log-level <level>", "debug | info | warn | error", "info")
    .action(async (opts: DecommissionFlags) => {
      const logger = createLogger({ level: opts.logLevel, name: "imp-decommission" });
      const kubeConfig = loadKubeConfig(opts.kubeconfig);
      const report = await decommission({
        pools: createResourceClient<ImpVMRunnerPool>(kubeConfig, IMP_VM_RUNNER_POOLS),
        vms: createResourceClient<ImpVM>(kubeConfig, IMP_VMS),
        nodes: createResourceClient<ImpNode>(kubeConfig, IMP_NODES),
        leases: createResourceClient<Lease>(kubeConfig, LEASE_RESOURCE),
        leaseNamespace: opts.agentLeaseNamespace,
        ...(opts.namespace === undefined ? {} : { namespace: opts.namespace }),
        keepNodeState: opts.keepNodeState,
        vmTimeoutMs: seconds(opts.vmTimeout, "--vm-timeout") * 1000,
        nodeTimeoutMs: seconds(opts.nodeTimeout, "--node-timeout") * 1000,
        clock: systemClock,
        logger,
      });
      process.stdout.write(
        `deleted ${report.poolsDeleted} pool(s) and ${report.vmsDeleted} VM(s), gone in ${(report.vmsGoneMs / 1000).toFixed(1)} s; ` +
          `nodes retired by their agent: ${report.nodesRetired.join(", ") || "none"}; removed here (agent did not answer): ${report.nodesForced.join(", ") || "none"}\n`,
      );
    });
}
