import { KubeConfig } from "@kubernetes/client-node";
import type { Command } from "commander";
import { buildAllCrds } from "../../api/index.ts";
import { installCrds } from "../../kube/index.ts";

/** `imp crds install`: applies the Imp CRDs to the cluster of the current kubeconfig and waits until they are Established. */
export function registerCrds(program: Command): void {
  program
    .command("crds")
    .description("the Imp CustomResourceDefinitions")
    .command("install")
    .description("create or update the Imp CRDs and wait until the API server serves them")
    .option("--kubeconfig <path>", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    .option("--timeout <seconds>", "how long to wait for Established", "60")
    .action(async (opts: { kubeconfig?: string; timeout: string }) => {
      const kubeConfig = new KubeConfig();
      if (opts.kubeconfig === undefined) kubeConfig.loadFromDefault();
      else kubeConfig.loadFromFile(opts.kubeconfig);
      const installed = await installCrds(kubeConfig, buildAllCrds(), { timeoutMs: Number(opts.timeout) * 1000 });
      for (const crd of installed) process.stdout.write(`${crd.name} ${crd.action}\n`);
    });
}
