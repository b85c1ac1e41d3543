/**
 * The demo behind `npm run demo`: the newest things that work end to end, on real components.
 * 1. A real control plane (etcd, kube-apiserver, kube-controller-manager) on loopback.
 * 2. The Imp CRDs installed, sample objects applied, and an invalid object rejected by the API server.
 * 3. A real Debian kernel booted under QEMU with the Imp guest agent as PID 1, reached over the same
 *    hybrid-vsock protocol Firecracker uses; a job runs with a secret in its environment, its output
 *    streams back, its exit code is reported exactly, and a repeated exec id starts nothing new.
 * Everything started here is stopped when the demo ends, also on failure or Ctrl-C.
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { installCrds } from "../src/api/index.ts";
import { startControlPlane, type ControlPlane } from "../src/devcluster/index.ts";
import { bootTestVm, runExec } from "../test/harness/vm.ts";

const run = promisify(execFile);
const say = (text: string): void => void process.stdout.write(`\n\x1b[1m== ${text}\x1b[0m\n`);

async function kubectl(plane: ControlPlane, args: readonly string[], input?: string): Promise<string> {
  const child = run(plane.binaries.kubectl, ["--kubeconfig", plane.kubeconfigPath, ...args]);
  if (input !== undefined) {
    child.child.stdin?.end(input);
  }
  try {
    const { stdout, stderr } = await child;
    return stdout + stderr;
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string };
    return `${e.stdout ?? ""}${e.stderr ?? ""}`;
  }
}

const INVALID_POOL = `apiVersion: imp.dev/v1alpha1
kind: ImpVMRunnerPool
metadata:
  name: broken
spec:
  templateName: ubuntu-runner
  github:
    credentialsSecretRef: { name: github-app }
    labels: [self-hosted]
    scope: repo
  minIdle: 5
  maxConcurrent: 2
  runnerCommand: ["/home/runner/run.sh"]
`;

async function controlPlaneDemo(plane: ControlPlane): Promise<void> {
  say(`control plane ready in ${(plane.startupMs / 1000).toFixed(1)} s at ${plane.server}`);
  const installed = await installCrds(plane.kubeConfig);
  say(`installed ${installed.length} CRDs`);
  process.stdout.write(await kubectl(plane, ["get", "crd", "-o", "custom-columns=NAME:.metadata.name,SHORT:.spec.names.shortNames,SCOPE:.spec.scope"]));
  say("kubectl apply -f deploy/samples/");
  process.stdout.write(await kubectl(plane, ["apply", "-f", "deploy/samples/"]));
  say("kubectl get imp   (the `imp` category lists every Imp kind)");
  process.stdout.write(await kubectl(plane, ["get", "imp"]));
  say("an invalid runner pool is rejected by the API server itself (schema + CEL):");
  process.stdout.write(await kubectl(plane, ["apply", "-f", "-"], INVALID_POOL));
}

async function vmDemo(): Promise<void> {
  say("booting a microVM under QEMU (software emulation here; Firecracker on KVM nodes)");
  const vm = await bootTestVm({ name: "demo" });
  let passed = false;
  try {
    say(`guest agent ${vm.hello.agent} answered hello over ${vm.channel} ${(vm.bootMs / 1000).toFixed(1)} s after spawn`);
    const job = {
      execId: "demo-job-1",
      argv: ["/bin/sh", "-c", 'echo "job running as $(id -u) on $(uname -sr) in $(hostname)"; echo "secret has ${#RUNNER_SECRET} chars"; echo scratch > /tmp/out; exit 7'],
      env: { PATH: "/bin:/sbin:/usr/bin", RUNNER_SECRET: "one-time-setup-never-logged" },
    };
    const result = await runExec(vm.client, job);
    process.stdout.write(result.stdout);
    say(`job exited with code ${result.exitCode} (reported exactly by the guest)`);
    const again = await vm.client.exec(job);
    say(`the same exec id again: started=${again.started}, state=${again.state} (no second process)`);
    await vm.client.shutdown("poweroff");
    const exit = await vm.vm.exited();
    say(`guest powered off; QEMU exited with code ${String(exit.code)}`);
    passed = true;
  } finally {
    await vm.dispose(passed);
  }
}

const plane = await startControlPlane();
const stop = async (): Promise<void> => {
  await plane.stop();
};
for (const [signal, code] of [["SIGINT", 130], ["SIGTERM", 143]] as const) {
  process.once(signal, () => void stop().then(() => process.exit(code)));
}
try {
  await controlPlaneDemo(plane);
  await vmDemo();
} finally {
  await stop();
  say("stopped everything the demo started");
}
