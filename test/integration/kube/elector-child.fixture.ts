// A tiny leader-election candidate run as its own process by leader-election.test.ts.
// argv: <kubeconfig> <identity> <namespace> <lease> <leaseMs> <renewMs> <retryMs>
// Prints one JSON line per transition: {"event":"ready"|"leading"|"stopped","identity","at"}.
import { KubeConfig } from "@kubernetes/client-node";
import { LEASE_RESOURCE, LeaderElector, createResourceClient, type Lease } from "../../../src/kube/index.ts";

const [kubeconfig, identity, namespace, name, leaseMs, renewMs, retryMs] = process.argv.slice(2);
if (kubeconfig === undefined || identity === undefined || namespace === undefined || name === undefined) {
  throw new Error("Cannot start elector child: usage: <kubeconfig> <identity> <namespace> <lease> <leaseMs> <renewMs> <retryMs>");
}
const say = (event: string, extra: Record<string, unknown> = {}): void => {
  process.stdout.write(`${JSON.stringify({ event, identity, at: Date.now(), ...extra })}\n`);
};

const kc = new KubeConfig();
kc.loadFromFile(kubeconfig);
const stop = new AbortController();
process.on("SIGTERM", () => stop.abort());

const elector = new LeaderElector({
  client: createResourceClient<Lease>(kc, LEASE_RESOURCE, { callTimeoutMs: 3_000 }),
  namespace,
  name,
  identity,
  leaseDurationMs: Number(leaseMs),
  renewDeadlineMs: Number(renewMs),
  retryPeriodMs: Number(retryMs),
  onStartedLeading: async (signal) => {
    say("leading");
    await new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
  },
  onStoppedLeading: (reason) => say("stopped", { reason }),
});
say("ready");
await elector.start(stop.signal);
