/**
 * Imp installed the way a platform team installs it, on a real node: a control plane that serves
 * kubelets, a kubelet with containerd and runc in a network namespace of its own
 * (test/e2e/real-node/kube-node.ts), Imp's image built by the repo (scripts/build/imp-image.sh) and
 * imported into that containerd, and `helm install` of deploy/helm/imp. Then what users do: a runner
 * pool (scale-set mode: no inbound webhook) gets a microVM started by the agent Pod; a job runs in
 * it; the agent DaemonSet is rolled while a job runs, and the job completes on the VM the new agent
 * Pod adopted; then `helm uninstall` with VMs still running: the chart's pre-delete hook ends them
 * and retires the node, after which nothing of Imp is left in the cluster or on the node (the first
 * time but the state directory it was told to keep, for a warm second install; the second time not
 * that either).
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { ANNOTATIONS, GITHUB_APP_SECRET_KEYS, IMP_NODES, IMP_VMS, type ImpNode, type ImpVM } from "../../src/api/index.ts";
import { startControlPlane, type ControlPlane } from "../../src/devcluster/index.ts";
import { createResourceClient, type ResourceClient } from "../../src/kube/index.ts";
import { waitFor } from "../../src/shared/index.ts";
import { appKeyPair, APP_ID, INSTALLATION_ID } from "../github/harness.ts";
import { GitHubTestServer, type TestJob } from "../github/server.ts";
import { parse as parseYaml } from "yaml";
import { killCgroupTree } from "../harness/cgroups.ts";
import { buildImage, busyboxLayer } from "../harness/oci-image.ts";
import { prometheusUnavailable, RunningPrometheus } from "../harness/prometheus.ts";
import { pushImage, startRegistry, type RunningRegistry } from "../harness/registry.ts";
import { KubeNode, kubeNodeUnavailable, NODE_BIN } from "./real-node/kube-node.ts";
import { helloSteps } from "./runner-path/jobs.ts";
import { SimNodes, simNodesUnavailable, type SimNodeNet } from "./runner-path/sim-nodes.ts";
import { classYaml, forwardTcp, poolYaml, REPO, runnerLayer, templateYaml, testRunnerPath, type TcpForwarder } from "./runner-path/world.ts";

const execFileAsync = promisify(execFile);
const repoRoot = resolve(import.meta.dirname, "../..");
const cacheDir = process.env.IMP_CACHE ?? join(repoRoot, ".cache");
const helmBin = join(cacheDir, "bin", "helm");
const RELEASE_NS = "imp-system";
const NS = "ci";
const POOL = "linux";
const s = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;
const say = (line: string): void => void process.stdout.write(`# ${line}\n`);

async function unavailable(): Promise<string | undefined> {
  const reason = (await simNodesUnavailable()) ?? (await kubeNodeUnavailable());
  if (reason !== undefined) return reason;
  if (!existsSync(helmBin)) return `no helm at ${helmBin} (scripts/setup.d/64-helm.sh)`;
  const noPrometheus = prometheusUnavailable();
  if (noPrometheus !== undefined) return noPrometheus;
  if (!existsSync(testRunnerPath)) return `no test runner at ${testRunnerPath} (scripts/setup.sh)`;
  if (!existsSync(join(cacheDir, "rootfs", "imp", "layer.tar.gz"))) return "no base layer for Imp's image (scripts/setup.d/58-runner-rootfs.sh)";
  if (!existsSync("/dev/kvm") && !existsSync("/usr/bin/qemu-system-x86_64")) return "no QEMU";
  return undefined;
}

const skip = await unavailable();
if (skip !== undefined) say(`real-node test cannot run on this machine: ${skip}`);

describe("Imp on a real node: helm install, a job in a VM of the agent Pod, the agent rolled mid-job, helm uninstall", { skip, timeout: 1_800_000 }, () => {
  const cleanups: Array<() => Promise<unknown>> = [];
  let sim: SimNodes;
  let net: SimNodeNet;
  let plane: ControlPlane;
  let node: KubeNode;
  /** A second machine, joined mid-run for the drain and the vanished node. */
  let netB: SimNodeNet;
  let nodeB: KubeNode;
  /** Node names carry the run's prefix: an agent's cgroup parent is `imp/<node>` by default. */
  let nodeA = "";
  let nodeBName = "";
  let imageTar = "";
  let registry: RunningRegistry;
  let forwarder: TcpForwarder;
  let github: GitHubTestServer;
  let dir: string;
  let stateDir: string;
  let vms: ResourceClient<ImpVM>;
  const kubectl = async (args: readonly string[], input?: string): Promise<string> => {
    const child = execFileAsync(plane.binaries.kubectl, ["--kubeconfig", plane.kubeconfigPath, ...args], { timeout: 120_000, maxBuffer: 16 << 20 });
    if (input !== undefined) child.child.stdin?.end(input);
    return (await child).stdout;
  };
  const helm = async (args: readonly string[]): Promise<string> =>
    (await execFileAsync(helmBin, ["--kubeconfig", plane.kubeconfigPath, ...args], { timeout: 600_000, maxBuffer: 16 << 20, env: { ...process.env, HELM_CACHE_HOME: join(dir, "helm-cache"), HELM_CONFIG_HOME: join(dir, "helm-config"), HELM_DATA_HOME: join(dir, "helm-data") } })).stdout;
  /** What the agent Pod(s) logged, for failure messages. */
  const agentLogs = async (): Promise<string> => (await kubectl(["-n", RELEASE_NS, "logs", "-l", "app.kubernetes.io/component=agent", "--tail=40", "--prefix"]).catch((e: unknown) => String(e))).slice(-6000);
  const operatorLogs = async (): Promise<string> => (await kubectl(["-n", RELEASE_NS, "logs", "-l", "app.kubernetes.io/component=operator", "--tail=40"]).catch((e: unknown) => String(e))).slice(-6000);
  const agentPods = async (): Promise<Array<{ name: string; uid: string; ready: boolean; deleting: boolean }>> => {
    const list = JSON.parse(await kubectl(["-n", RELEASE_NS, "get", "pods", "-l", "app.kubernetes.io/component=agent", "-o", "json"])) as { items: Array<{ metadata: { name: string; uid: string; deletionTimestamp?: string }; status?: { conditions?: Array<{ type: string; status: string }> } }> };
    return list.items.map((p) => ({ name: p.metadata.name, uid: p.metadata.uid, deleting: p.metadata.deletionTimestamp !== undefined, ready: p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") === true }));
  };
  /** The agent Pod's resident memory (MiB) and CPU use over `overMs` (% of one core), from its cgroups: VMs are not in them. */
  const agentPodUsage = async (overMs = 5_000): Promise<string> => {
    const pod = (await agentPods()).find((p) => p.ready && !p.deleting);
    if (pod === undefined) return "no agent Pod";
    const find = (hierarchy: string): string | undefined => {
      const base = join("/sys/fs/cgroup", hierarchy, node.cgroupRoot, "kubepods");
      for (const qos of ["", "burstable", "besteffort"]) if (existsSync(join(base, qos, `pod${pod.uid}`))) return join(base, qos, `pod${pod.uid}`);
      return undefined;
    };
    const mem = find("memory");
    const cpu = find("cpuacct");
    if (mem === undefined || cpu === undefined) return "agent Pod cgroup not found";
    const rss = Number(/^total_rss (\d+)$/m.exec(await readFile(join(mem, "memory.stat"), "utf8"))?.[1] ?? NaN);
    const t0 = Number(await readFile(join(cpu, "cpuacct.usage"), "utf8"));
    await new Promise((r) => setTimeout(r, overMs));
    const t1 = Number(await readFile(join(cpu, "cpuacct.usage"), "utf8"));
    return `agent Pod RSS ${(rss / 2 ** 20).toFixed(0)} MiB, CPU ${(((t1 - t0) / 1e6 / overMs) * 100).toFixed(1)}% of a core over ${overMs / 1000} s`;
  };
  const onlineRunner = async (except: ReadonlySet<string> = new Set()): Promise<ImpVM | undefined> =>
    (await vms.list({ namespace: NS })).items.find((vm) => !except.has(vm.metadata.name ?? "") && vm.status?.phase === "Running" && github.runnerNamed(vm.metadata.name ?? "")?.status === "online");
  const waitJob = (job: TestJob, timeoutMs: number): Promise<TestJob> =>
    waitFor(`job ${job.name} completed`, () => (job.status === "completed" ? job : undefined), { timeoutMs, intervalMs: 200 }).catch(async (err: unknown) => {
      throw new Error(`${String(err)}\nagent:\n${await agentLogs()}\noperator:\n${await operatorLogs()}`);
    });
  let installedAt = 0;
  let values: object = {};
  /** `helm install --wait` of the chart with this world's values; returns how long it took. */
  const install = async (): Promise<number> => {
    await writeFile(join(dir, "values.json"), JSON.stringify(values));
    const t0 = Date.now();
    await helm(["install", "imp", join(repoRoot, "deploy/helm/imp"), "--namespace", RELEASE_NS, "--create-namespace", "--values", join(dir, "values.json"), "--wait", "--timeout", "10m"]).catch(async (err: unknown) => {
      throw new Error(`helm install failed: ${String(err)}\nagent:\n${await agentLogs()}\noperator:\n${await operatorLogs()}\n${await kubectl(["get", "pods", "-A", "-o", "wide"]).catch(() => "")}`);
    });
    uninstalled = false;
    installedAt = Date.now();
    return installedAt - t0;
  };
  /**
   * `helm uninstall` with the pool and its VMs still there: the chart's pre-delete hook ends them and
   * retires the node. Returns what of Imp is left, in the cluster and on the node, and how long it took.
   */
  const uninstall = async (keptState: boolean): Promise<{ readonly left: string[]; readonly ms: number; readonly vmsEnded: number }> => {
    const vmsEnded = (await vms.list({ namespace: NS })).items.length;
    const t0 = Date.now();
    await helm(["uninstall", "imp", "--namespace", RELEASE_NS, "--wait", "--timeout", "6m"]).catch(async (err: unknown) => {
      throw new Error(`helm uninstall failed: ${String(err)}\nhook:\n${await kubectl(["-n", RELEASE_NS, "logs", "job/imp-decommission", "--tail=40"]).catch((e: unknown) => String(e))}\nagent:\n${await agentLogs()}\noperator:\n${await operatorLogs()}`);
    });
    const ms = Date.now() - t0;
    uninstalled = true;
    await waitFor("no agent or operator Pod", async () => ((await kubectl(["-n", RELEASE_NS, "get", "pods", "-o", "name"])).trim() === "" ? true : undefined), { timeoutMs: 180_000, intervalMs: 500 });
    const left: string[] = [];
    const names = async (args: readonly string[]): Promise<string[]> => (await kubectl(["get", ...args, "-o", "name"])).split("\n").filter((l) => l !== "");
    left.push(...(await names(["impvmrunnerpool,impvm", "-A"])).map((n) => `${n} in the cluster`));
    left.push(...(await names(["impnode"])).map((n) => `${n} in the cluster`));
    left.push(...(await names(["-n", RELEASE_NS, "lease"])).filter((n) => n.includes("imp-agent-")).map((n) => `${n} in the cluster`));
    left.push(...(await names(["-n", RELEASE_NS, "job,serviceaccount,role,rolebinding"])).filter((n) => n.includes("imp-")).map((n) => `hook's ${n} in the cluster`));
    left.push(...(await names(["clusterrole,clusterrolebinding"])).filter((n) => n.includes("imp-")).map((n) => `${n} in the cluster`));
    const procs = (await execFileAsync("pgrep", ["-af", stateDir]).then((r) => r.stdout, () => "")).split("\n").filter((l) => l !== "");
    left.push(...procs.map((p) => `process ${p}`));
    const links = JSON.parse((await execFileAsync("ip", ["-n", net.netns, "-j", "link", "show"])).stdout) as Array<{ ifname: string }>;
    left.push(...links.map((l) => l.ifname).filter((n) => n.startsWith("imp") || n.startsWith("tap")).map((n) => `link ${n}`));
    const tables = (await execFileAsync("ip", ["netns", "exec", net.netns, "nft", "list", "tables"])).stdout.split("\n").filter((l) => /imp/.test(l));
    left.push(...tables.map((t) => `nftables ${t}`));
    for (const h of ["memory", "unified", ""]) for (const n of [nodeA, nodeBName]) if (existsSync(join("/sys/fs/cgroup", h, "imp", n))) left.push(`cgroup ${join("/sys/fs/cgroup", h, "imp", n)}`);
    const vmDirs = await readdir(join(stateDir, "vms")).catch(() => []);
    left.push(...vmDirs.map((d) => `VM directory ${d}`));
    // The state directory: kept when asked (a later install finds its image cache), emptied otherwise.
    const state = await readdir(stateDir);
    if (keptState) assert.ok(state.includes("images"), `the state directory was kept as asked (${state.join(", ")})`);
    else left.push(...state.map((e) => `state ${join(stateDir, e)}`));
    left.push(...[...github.runners.values()].map((r) => `runner ${r.name} still registered`));
    return { left, ms, vmsEnded };
  };
  let imageRef = "";
  let uninstalled = false;

  before(async () => {
    const undo = async (): Promise<void> => {
      for (const c of cleanups.splice(0).reverse()) await c().catch((e: unknown) => say(`cleanup: ${String(e)}`));
    };
    try {
      dir = await mkdtemp("/tmp/imp-rn-");
      cleanups.push(() => rm(dir, { recursive: true, force: true }));
      sim = new SimNodes();
      cleanups.push(() => sim.dispose());
      nodeA = `${sim.prefix}-a`;
      nodeBName = `${sim.prefix}-b`;
      net = await sim.add(nodeA);
      plane = await startControlPlane({ nodes: { address: net.hostAddress, kubeScheduler: join(NODE_BIN, "kube-scheduler") } });
      cleanups.push(() => plane.stop());
      node = await KubeNode.start({ name: nodeA, dir: join(dir, "node"), netns: net.netns, nodeIp: net.uplinkAddress, plane, labels: { "imp.dev/kvm": "true" } });
      cleanups.push(() => node.stop());
      say(`control plane at ${plane.server}; ${nodeA} Ready ${s(node.readyMs)} after containerd started (kubelet ${NODE_BIN}, netns ${net.netns})`);

      const built = Date.now();
      const [ref, digest, , tar] = (await execFileAsync("bash", [join(repoRoot, "scripts/build/imp-image.sh")], { timeout: 900_000, maxBuffer: 16 << 20 })).stdout.trim().split(" ");
      assert.ok(ref !== undefined && digest !== undefined && tar !== undefined);
      imageRef = ref;
      imageTar = tar;
      const imported = Date.now();
      await node.importImage(tar);
      say(`${ref} (${digest}) built in ${s(imported - built)}, imported into the node's containerd in ${s(Date.now() - imported)}`);

      registry = await startRegistry();
      cleanups.push(() => registry.stop());
      forwarder = await forwardTcp(net.hostAddress, new URL(registry.url));
      cleanups.push(() => forwarder.close());
      await pushImage(registry.url, "ci/base", "1", buildImage([await busyboxLayer()]));
      await pushImage(registry.url, "ci/runner", "1", buildImage([await runnerLayer()]));
      const keys = appKeyPair();
      github = await new GitHubTestServer({ appId: APP_ID, installationId: INSTALLATION_ID, appPublicKey: keys.publicKey, host: net.hostAddress, actionsService: { queuePollMs: 5_000, sessionIdleMs: 20_000, reassignAfterMs: 600_000 } }).start();
      cleanups.push(() => github.stop());

      stateDir = join(dir, "imp-state");
      await mkdir(stateDir, { recursive: true });
      values = {
        image: { repository: ref.split(":")[0], tag: ref.split(":")[1], pullPolicy: "Never" },
        operator: { logLevel: "debug" },
        // The first uninstall keeps the image cache, so the second install can be measured warm.
        uninstall: { keepNodeState: true },
        agent: {
          stateDir,
          logLevel: "debug",
          config: {
            capacity: { vcpu: 4, memoryMiB: 4096, vmSlots: 3 },
            imageCacheMaxBytes: 2 * 1024 ** 3,
            plainHttpRegistries: [forwarder.address],
            sweepIntervalSeconds: 10,
            network: { uplink: net.uplink, allowedCIDRs: [`${net.hostAddress}:${new URL(github.url).port}`, forwarder.address] },
          },
        },
      };
      const installMs = await install();
      cleanups.push(async () => (uninstalled ? undefined : helm(["uninstall", "imp", "--namespace", RELEASE_NS, "--wait", "--timeout", "6m"])));
      say(`helm install --wait: ${s(installMs)} (operator Deployment and agent DaemonSet ready)`);

      vms = createResourceClient<ImpVM>(plane.kubeConfig, IMP_VMS);
      await kubectl(["create", "namespace", NS]);
      const b64 = (v: string): string => Buffer.from(v).toString("base64");
      await kubectl(["apply", "-f", "-"], JSON.stringify({ apiVersion: "v1", kind: "Secret", metadata: { name: "github-app", namespace: NS }, data: { [GITHUB_APP_SECRET_KEYS.appId]: b64(String(APP_ID)), [GITHUB_APP_SECRET_KEYS.installationId]: b64(String(INSTALLATION_ID)), [GITHUB_APP_SECRET_KEYS.privateKey]: b64(keys.privateKey) } }));
      await kubectl(["apply", "-f", "-"], classYaml());
      await kubectl(["apply", "-f", "-"], templateYaml(NS, `${forwarder.address}/ci/base:1`, `${forwarder.address}/ci/runner:1`));
    } catch (err) {
      await undo();
      throw err;
    }
  });

  after(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch((e: unknown) => say(`cleanup: ${String(e)}`));
    for (const n of [node, nodeB]) {
      if (n === undefined) continue;
      const left = await n.hostChanges();
      assert.deepEqual(left, [], `${n.name}'s world put back every host setting it changed`);
    }
  });

  it("publishes the node from the agent Pod, with its setup key", async () => {
    const nodes = createResourceClient<ImpNode>(plane.kubeConfig, IMP_NODES);
    const published = await waitFor(`ImpNode ${nodeA} with a setup key`, async () => {
      const n = await nodes.get({ name: nodeA }).catch(() => undefined);
      return n?.status?.setupKey !== undefined ? n : undefined;
    }, { timeoutMs: 120_000, intervalMs: 500 }).catch(async (err: unknown) => Promise.reject(new Error(`${String(err)}\n${await agentLogs()}`)));
    say(`ImpNode ${nodeA}: accel ${published.status?.accel ?? "?"}, ${published.status?.kvmReason ?? ""}`.slice(0, 400));
    const pods = await agentPods();
    assert.equal(pods.length, 1, "one agent Pod on the one node");
    say(`idle node: ${await agentPodUsage()}`);
  });

  it("runs a job in a microVM the agent Pod started, from a pool applied with kubectl", async () => {
    const appliedAt = Date.now();
    const applied = await kubectl(["apply", "-f", "-"], poolYaml(NS, POOL, github.url, { minIdle: 1, maxConcurrent: 2, scaleSet: true }, 600, undefined));
    assert.match(applied, /created/);
    const vm = await waitFor("a runner VM online", () => onlineRunner(), { timeoutMs: 600_000, intervalMs: 500 }).catch(async (err: unknown) => {
      throw new Error(`${String(err)}\nVMs: ${JSON.stringify((await vms.list({ namespace: NS })).items.map((v) => v.status))}\nagent:\n${await agentLogs()}\noperator:\n${await operatorLogs()}`);
    });
    say(`first runner online ${s(Date.now() - appliedAt)} after the pool was applied, ${s(Date.now() - installedAt)} after helm install returned (${vm.metadata.name ?? ""} on ${vm.status?.nodeName ?? "?"})`);
    const job = github.queueJob({ repo: REPO, labels: [POOL], steps: helloSteps(), name: "hello" });
    await waitJob(job, 300_000);
    assert.equal(job.conclusion, "success", job.result?.log);
    assert.equal(job.runnerName, vm.metadata.name);
    assert.match(job.result?.log ?? "", /hello from \S+, kernel \S+/);
  });

  it("keeps a job's VM running while the agent DaemonSet is rolled; the new agent Pod adopts it and the job completes", async () => {
    await waitFor("an idle runner online", () => onlineRunner(), { timeoutMs: 600_000, intervalMs: 500 });
    const job = github.queueJob({ repo: REPO, labels: [POOL], steps: [{ name: "long", run: "echo begun; sleep 45; echo outlived the agent" }], name: "rolled" });
    await waitFor(`job ${job.name} running`, () => (job.status !== "queued" ? job : undefined), { timeoutMs: 120_000, intervalMs: 200 });
    // Whichever idle runner took it (two may be online): that VM must outlive the agent Pod.
    const name = job.runnerName ?? "";
    const vm = await vms.get({ namespace: NS, name });
    const running = (await vms.list({ namespace: NS })).items.filter((v) => v.status?.phase === "Running").length;
    say(`${running} VM(s) running: ${await agentPodUsage(3_000)}`);
    const before = await agentPods();
    const rolled = Date.now();
    await kubectl(["-n", RELEASE_NS, "rollout", "restart", "daemonset/imp-agent"]);
    const oldGone = waitFor("the old agent Pod gone", async () => ((await agentPods()).some((p) => before.some((b) => b.uid === p.uid)) ? undefined : Date.now() - rolled), { timeoutMs: 300_000, intervalMs: 250 });
    const fresh = await waitFor("a new agent Pod Ready", async () => (await agentPods()).find((p) => p.ready && !p.deleting && !before.some((b) => b.uid === p.uid)), { timeoutMs: 300_000, intervalMs: 250 });
    const replacedAfter = Date.now() - rolled;
    const adopted = await waitFor(`the new agent reports ${name} Running`, async () => {
      const logs = await kubectl(["-n", RELEASE_NS, "logs", fresh.name]).catch(() => "");
      return /adopt/i.test(logs) && logs.includes(vm.metadata.uid ?? "-") ? logs : undefined;
    }, { timeoutMs: 120_000, intervalMs: 500 }).then(() => Date.now() - rolled, () => undefined);
    await waitJob(job, 300_000);
    assert.equal(job.conclusion, "success", job.result?.log);
    assert.match(job.result?.log ?? "", /outlived the agent/);
    const stoppedLines = (await node.log("kubelet")).split("\n").filter((l) => /Killing container|ContainerDied|container.*agent.*(exited|finished)/i.test(l) && l.includes("agent")).slice(-4).join("\n");
    say(`agent DaemonSet rolled mid-job: old agent Pod gone ${s(await oldGone)} after the restart, new one Ready ${s(replacedAfter)} after${adopted === undefined ? "" : `, ${name} adopted ${s(adopted)} after`}; job ${job.conclusion ?? "?"} on ${name}\n${stoppedLines}`);
    await waitFor(`${name} deleted after its job`, async () => ((await vms.get({ namespace: NS, name }).catch(() => undefined)) === undefined ? true : undefined), { timeoutMs: 300_000, intervalMs: 500 });
  });

  it("upgrades the agent to a new image with three VMs running: the new agent Pod adopts every one, and they still take jobs", async () => {
    await kubectl(["-n", NS, "patch", "impvmrunnerpool", POOL, "--type=merge", "-p", '{"spec":{"minIdle":3,"maxConcurrent":3}}']);
    const three = await waitFor("three runner VMs online", async () => {
      const online = (await vms.list({ namespace: NS })).items.filter((vm) => vm.status?.phase === "Running" && github.runnerNamed(vm.metadata.name ?? "")?.status === "online");
      return online.length >= 3 ? online : undefined;
    }, { timeoutMs: 600_000, intervalMs: 500 });
    say(`3 VMs running: ${await agentPodUsage()}`);
    // A new image, as an upgrade brings: the same content under a new tag (a new Pod spec).
    await node.ctr(["images", "tag", "--force", `docker.io/${imageRef}`, `docker.io/${imageRef}-upgrade`]);
    const before = await agentPods();
    const upgraded = Date.now();
    await helm(["upgrade", "imp", join(repoRoot, "deploy/helm/imp"), "--namespace", RELEASE_NS, "--reuse-values", "--set", `image.tag=${imageRef.split(":")[1] ?? ""}-upgrade`, "--wait", "--timeout", "5m"]);
    const fresh = await waitFor("the upgraded agent Pod Ready", async () => (await agentPods()).find((p) => p.ready && !p.deleting && !before.some((b) => b.uid === p.uid)), { timeoutMs: 300_000, intervalMs: 250 });
    const image = (await kubectl(["-n", RELEASE_NS, "get", "pod", fresh.name, "-o", "jsonpath={.spec.containers[0].image}"])).trim();
    assert.match(image, /-upgrade$/);
    const uids = three.map((vm) => vm.metadata.uid ?? "");
    const adoptedAll = await waitFor("every VM re-adopted by the upgraded agent", async () => {
      const logs = (await kubectl(["-n", RELEASE_NS, "logs", fresh.name]).catch(() => "")).split("\n").filter((l) => l.includes("re-adopted a running VM"));
      return uids.every((uid) => logs.some((l) => l.includes(uid))) ? Date.now() - upgraded : undefined;
    }, { timeoutMs: 180_000, intervalMs: 500 }).catch(async (err: unknown) => Promise.reject(new Error(`${String(err)}\n${await agentLogs()}`)));
    for (const vm of three) {
      const now = await vms.get({ namespace: NS, name: vm.metadata.name ?? "" });
      assert.equal(now.status?.phase, "Running", `${vm.metadata.name ?? ""} still Running after the upgrade`);
      assert.equal(now.metadata.uid, vm.metadata.uid);
    }
    const job = github.queueJob({ repo: REPO, labels: [POOL], steps: helloSteps(), name: "after-upgrade" });
    await waitJob(job, 300_000);
    assert.equal(job.conclusion, "success", job.result?.log);
    assert.ok(uids.some((uid) => three.find((v) => v.metadata.uid === uid)?.metadata.name === job.runnerName), `a VM from before the upgrade took the job (${job.runnerName ?? "?"})`);
    say(`helm upgrade to a new image with 3 VMs running: every VM re-adopted ${s(adoptedAll)} after the upgrade began; ${job.runnerName ?? "?"} (booted before it) ran the next job`);
    const table = await kubectl(["get", "impvm,impvmrunnerpool", "-A"]);
    say(`kubectl get impvm,impvmrunnerpool -A:\n${table.split("\n").map((l) => `#   ${l}`).join("\n")}`);
  });

  /** Running VMs on `nodeName` whose runner is online and idle. */
  const idleOn = async (nodeName: string): Promise<ImpVM[]> =>
    (await vms.list({ namespace: NS })).items.filter((vm) => vm.status?.nodeName === nodeName && vm.status.phase === "Running" && github.runnerNamed(vm.metadata.name ?? "")?.status === "online" && github.runnerNamed(vm.metadata.name ?? "")?.busy === false);
  /** Where the operator's Pod runs now (the one not being deleted). */
  const operatorNode = async (): Promise<string> => {
    const list = JSON.parse(await kubectl(["-n", RELEASE_NS, "get", "pods", "-l", "app.kubernetes.io/component=operator", "-o", "json"])) as { items: Array<{ metadata: { deletionTimestamp?: string }; spec: { nodeName?: string } }> };
    return list.items.filter((p) => p.metadata.deletionTimestamp === undefined).map((p) => p.spec.nodeName ?? "unscheduled").join(",");
  };
  const drainMark = async (nodeName: string, key: string): Promise<string | undefined> => (await createResourceClient<ImpNode>(plane.kubeConfig, IMP_NODES).get({ name: nodeName })).metadata.annotations?.[key];

  it("a real Prometheus scrapes the operator and the agent with the configuration docs/operations.md gives, finds the series a user needs after real jobs, answers every dashboard query and evaluates Imp's alert rules on them", async (t) => {
    // The scrape configuration as the doc shows it, told how to reach this API server from outside the
    // cluster; inside the node's network namespace, where the operator's Pod and the agent are reachable.
    const doc = await readFile(join(repoRoot, "docs/operations.md"), "utf8");
    const block = /```yaml\n(scrape_configs:[\s\S]*?)```/.exec(doc)?.[1];
    assert.ok(block !== undefined, "docs/operations.md shows a scrape configuration");
    const documented = parseYaml(block) as { scrape_configs: Array<{ job_name: string; kubernetes_sd_configs: Array<Record<string, unknown>> }> };
    const { cert, key } = await plane.clientCertificate("prometheus", "prometheus", ["system:masters"]);
    for (const job of documented.scrape_configs) for (const sd of job.kubernetes_sd_configs) Object.assign(sd, { api_server: plane.server, tls_config: { ca_file: plane.caCert, cert_file: cert, key_file: key } });
    const config = { global: { scrape_interval: "2s", evaluation_interval: "2s" }, scrape_configs: documented.scrape_configs, rule_files: [join(repoRoot, "deploy/helm/imp/files/alerts.yaml")] };
    const prometheus = await RunningPrometheus.start({ dir: join(dir, "prometheus"), config, listen: `${net.uplinkAddress}:9090`, netns: net.netns });
    t.after(() => prometheus.stop());
    // A job the operator now leading sees from start to end: the upgrade restarted the operator, and
    // on a loaded machine the job before it may have run while the old one still led (its counters
    // went with it).
    // Under load the upgraded operator may take the lead well after helm returned: the job is queued
    // once one operator Pod is left and it holds the pool's scale-set session (it gets the job's messages).
    await waitFor("one operator Pod left, leading and holding the pool's session", async () => {
      const pods = (await prometheus.query('up{job="imp-operator"}').catch(() => [])).length;
      const leader = (await prometheus.query("max(imp_operator_leader)").catch(() => []))[0]?.value;
      const session = (await prometheus.query(`sum(imp_operator_scale_set_session{namespace="${NS}",name="${POOL}"})`).catch(() => []))[0]?.value;
      return pods === 1 && leader === 1 && session === 1 ? true : undefined;
    }, { timeoutMs: 180_000, intervalMs: 1_000 });
    const observed = github.queueJob({ repo: REPO, labels: [POOL], steps: helloSteps(), name: "observed" });
    await waitJob(observed, 300_000);
    assert.equal(observed.conclusion, "success", observed.result?.log);
    const one = async (expr: string): Promise<number | undefined> => (await prometheus.query(expr))[0]?.value;
    // Each expression must give one sample meeting its check; the names are what a user asks.
    const wanted: Array<[string, string, (v: number) => boolean]> = [
      ["the operator scraped", 'sum(up{job="imp-operator"})', (v) => v === 1],
      ["the agent scraped, with its node", `sum(up{job="imp-agent",node="${nodeA}"})`, (v) => v === 1],
      ["a leader", "max(imp_operator_leader)", (v) => v === 1],
      ["the pool's bounds", `gha_max_runners{namespace="${NS}",name="${POOL}"} + gha_min_runners{namespace="${NS}",name="${POOL}"}`, (v) => v === 6],
      ["jobs' queue time for the pool", `sum(gha_job_queue_duration_seconds_count{actions_github_com_scale_set_name="${POOL}"})`, (v) => v >= 1],
      ["jobs completed", 'sum(gha_completed_jobs_total{job_result="succeeded"})', (v) => v >= 1],
      ["jobs' duration", 'sum(gha_job_execution_duration_seconds_count{job_result="succeeded"})', (v) => v >= 1],
      ["VMs by phase on the node", `sum(imp_agent_vms{phase="Running",node="${nodeA}"})`, (v) => v === 3],
      ["boots", "sum(imp_agent_boot_seconds_count)", (v) => v >= 1],
      ["VMs ended by reason (the boot-failure alert's input)", "sum(imp_agent_vms_ended_total)", (v) => v >= 1],
      ["setups delivered", "sum(imp_agent_setup_deliveries_total)", (v) => v >= 1],
      ["the pool's listener holding its session", `imp_operator_scale_set_session{namespace="${NS}",name="${POOL}"}`, (v) => v === 1],
      ["the node's state directory (% free)", `100 * sum(imp_agent_state_dir_free_bytes{node="${nodeA}"}) / sum(imp_agent_state_dir_size_bytes{node="${nodeA}"})`, (v) => v > 0 && v < 100],
    ];
    const seen = await waitFor("every series a user needs", async () => {
      const values = await Promise.all(wanted.map(([, expr]) => one(expr)));
      return wanted.every(([, , ok], i) => values[i] !== undefined && ok(values[i])) ? values : undefined;
    }, { timeoutMs: 120_000, intervalMs: 1_000 }).catch(async (err: unknown) => {
      const values = await Promise.all(wanted.map(async ([what, expr]) => `${what} (${expr}): ${String(await one(expr).catch((e: unknown) => e))}`));
      throw new Error(`${String(err)}\n${values.join("\n")}\nprometheus:\n${await prometheus.logTail()}`);
    });
    // Every panel of the chart's dashboard, its variables at "All", must parse and answer after the jobs.
    const dashboard = JSON.parse(await readFile(join(repoRoot, "deploy/helm/imp/files/dashboard.json"), "utf8")) as { panels: Array<{ title: string; targets?: Array<{ expr: string }> }> };
    const asGrafana = (expr: string): string => expr.replaceAll("$__rate_interval", "1m").replaceAll("$__range", "10m").replaceAll("$pool", ".*").replaceAll("$node", ".*");
    const targets = dashboard.panels.flatMap((p) => (p.targets ?? []).map((tg) => ({ panel: p.title, expr: tg.expr })));
    let silent: string[] = [];
    await waitFor("every dashboard query answers", async () => {
      silent = [];
      for (const tg of targets) {
        const answer = await prometheus.query(asGrafana(tg.expr)).catch((err: unknown) => {
          throw new Error(`panel "${tg.panel}": ${tg.expr}: ${String(err)}`);
        });
        if (answer.length === 0) silent.push(`panel "${tg.panel}": ${tg.expr}`);
      }
      return silent.length === 0 ? true : undefined;
    }, { timeoutMs: 90_000, intervalMs: 2_000 }).catch((err: unknown) => Promise.reject(new Error(`${String(err)}; no data:\n${silent.join("\n")}`)));
    // Imp's alert rules, evaluated on these series: every one loaded, healthy, and none firing on a healthy fleet.
    const rules = await waitFor("every alert rule evaluated", async () => { const r = await prometheus.rules(); return r.length > 0 && r.every((x) => !x.lastEvaluation.startsWith("0001")) ? r : undefined; }, { timeoutMs: 60_000, intervalMs: 1_000 });
    assert.deepEqual(rules.filter((r) => r.health !== "ok").map((r) => `${r.name}: ${r.lastError ?? r.health}`), [], "every rule evaluates without error");
    assert.equal(rules.length, 9);
    // Every rule waits 5 min or more before firing, longer than this test runs: pending counts as well.
    assert.deepEqual((await prometheus.query("ALERTS")).map((a) => `${a.metric["alertname"] ?? ""} ${a.metric["alertstate"] ?? ""}`), [], "no alert pending or firing on a healthy fleet");
    say(`Prometheus (scrape configuration of docs/operations.md, kubernetes_sd against the API server): ${wanted.map(([what], i) => `${what} ${String(seen[i])}`).join("; ")}; ${rules.length} alert rules evaluated, none pending or firing; all ${targets.length} queries of the dashboard's ${dashboard.panels.filter((p) => p.targets !== undefined).length} panels answered`);
  });

  it("a second machine joins: the agent DaemonSet starts there and the agent publishes its node", async () => {
    netB = await sim.add(nodeBName);
    // The chart names one host path for every node's state; this machine hosts both, so the second
    // node sees a directory of its own there, as a second machine would.
    nodeB = await KubeNode.start({ name: nodeBName, dir: join(dir, "node-b"), netns: netB.netns, nodeIp: netB.uplinkAddress, plane, ownDirs: { [stateDir]: join(dir, "node-b-state") } });
    cleanups.push(() => nodeB.stop());
    // Whatever of its VMs a failed run leaves: they run outside its Pods' cgroups.
    cleanups.push(async () => killCgroupTree(`imp/${nodeBName}`));
    // Imp's image before the label that lets the DaemonSet in (pullPolicy Never: a Pod sooner would back off).
    await nodeB.importImage(imageTar);
    await nodeB.ctr(["images", "tag", "--force", `docker.io/${imageRef}`, `docker.io/${imageRef}-upgrade`]);
    const labeled = Date.now();
    await kubectl(["label", "node", nodeBName, "imp.dev/kvm=true"]);
    const nodes = createResourceClient<ImpNode>(plane.kubeConfig, IMP_NODES);
    await waitFor(`ImpNode ${nodeBName} with a setup key`, async () => ((await nodes.get({ name: nodeBName }).catch(() => undefined))?.status?.setupKey !== undefined ? true : undefined), { timeoutMs: 180_000, intervalMs: 500 }).catch(async (err: unknown) => Promise.reject(new Error(`${String(err)}\n${await agentLogs()}`)));
    const publishedAfter = Date.now() - labeled;
    // The agent publishes its node before its Pod's readiness probe has run.
    const pods = await waitFor("an agent Pod Ready on each node", async () => { const ready = (await agentPods()).filter((p) => p.ready && !p.deleting); return ready.length >= 2 ? ready : undefined; }, { timeoutMs: 120_000, intervalMs: 500 });
    assert.equal(pods.length, 2, "one agent Pod on each node");
    say(`${nodeBName} Ready ${s(nodeB.readyMs)} after its containerd started; labeled for Imp, its agent Pod published it ${s(publishedAfter)} later`);
  });

  it("kubectl drain of a node mid-job: the job finishes there, its idle runners are replaced on the other node, the node reports drained; uncordoned, it takes VMs again", async () => {
    // Three idle runners, all on the first node (they were booted before the second joined); one more may run beside them.
    await kubectl(["-n", NS, "patch", "impvmrunnerpool", POOL, "--type=merge", "-p", '{"spec":{"minIdle":3,"maxConcurrent":4}}']);
    await waitFor(`an idle runner on ${nodeA}`, async () => ((await idleOn(nodeA)).length > 0 ? true : undefined), { timeoutMs: 300_000, intervalMs: 500 });
    assert.deepEqual(await idleOn(nodeBName), [], `no runner on ${nodeBName} yet`);
    const job = github.queueJob({ repo: REPO, labels: [POOL], steps: [{ name: "work", run: "echo begun; sleep 40; echo finished on a drained node" }], name: "drained" });
    await waitFor(`job ${job.name} running`, () => (job.status !== "queued" ? job : undefined), { timeoutMs: 120_000, intervalMs: 200 });
    const vm = await vms.get({ namespace: NS, name: job.runnerName ?? "" });
    assert.equal(vm.status?.nodeName, nodeA, `the job runs on ${nodeA}`);
    const operatorBefore = await operatorNode();
    const drainAt = Date.now();
    // Evicts the operator's Pod too (the DaemonSet's agent stays): the drain is carried on by its successor.
    await kubectl(["drain", nodeA, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=100s"]);
    const drainReturned = Date.now() - drainAt;
    const elsewhere = await waitFor(`an idle runner online on ${nodeBName}`, async () => (await idleOn(nodeBName))[0], { timeoutMs: 300_000, intervalMs: 500 }).catch(async (err: unknown) => {
      throw new Error(`${String(err)}\nVMs: ${JSON.stringify((await vms.list({ namespace: NS })).items.map((v) => [v.metadata.name, v.status?.nodeName, v.status?.phase]))}\noperator:\n${await operatorLogs()}`);
    });
    const replacedAfter = Date.now() - drainAt;
    await waitJob(job, 300_000);
    assert.equal(job.conclusion, "success", `the job on the drained node finished: ${job.result?.log ?? ""}`);
    assert.match(job.result?.log ?? "", /finished on a drained node/);
    const drained = await waitFor(`${nodeA} reports drained`, () => drainMark(nodeA, ANNOTATIONS.drained), { timeoutMs: 300_000, intervalMs: 500 }).catch(async (err: unknown) => {
      throw new Error(`${String(err)}\noperator:\n${await operatorLogs()}`);
    });
    const live = (await vms.list({ namespace: NS })).items.filter((v) => v.status?.nodeName === nodeA && v.status.phase !== "Succeeded" && v.status.phase !== "Failed" && v.metadata.deletionTimestamp === undefined);
    assert.deepEqual(live.map((v) => v.metadata.name), [], `no live VM left on ${nodeA}`);
    const operatorAfter = await operatorNode();
    const hello = github.queueJob({ repo: REPO, labels: [POOL], steps: helloSteps(), name: "after-drain" });
    await waitJob(hello, 300_000);
    assert.equal(hello.conclusion, "success", hello.result?.log);
    assert.equal((await vms.get({ namespace: NS, name: hello.runnerName ?? "" }).catch(() => undefined))?.status?.nodeName ?? nodeBName, nodeBName, "the next job ran on the other node");
    // The pool's three idle runners, all on the node left (it fits three): the next case needs a job there.
    await waitFor(`three idle runners on ${nodeBName}`, async () => ((await idleOn(nodeBName)).length >= 3 ? true : undefined), { timeoutMs: 300_000, intervalMs: 500 });
    await kubectl(["uncordon", nodeA]);
    await waitFor(`${nodeA}'s drain marks cleared`, async () => ((await drainMark(nodeA, ANNOTATIONS.drainStarted)) === undefined && (await drainMark(nodeA, ANNOTATIONS.drained)) === undefined ? true : undefined), { timeoutMs: 120_000, intervalMs: 500 });
    say(`kubectl drain ${nodeA} mid-job returned in ${s(drainReturned)} (operator Pod moved ${operatorBefore} → ${operatorAfter}); idle runner ${elsewhere.metadata.name ?? ""} online on ${nodeBName} ${s(replacedAfter)} after the drain began; job ${job.conclusion ?? "?"} on ${vm.metadata.name ?? ""} (${nodeA}); ${nodeA} reported drained ${s(Date.parse(drained) - drainAt)} after the drain began; the next job ran on ${nodeBName}; uncordoned, its marks cleared`);
  });

  it("a machine vanishes mid-job (its kubelet, containerd, agent and VMs killed, its Node deleted): its VMs end NodeLost, the job fails on the forge, its runners are deregistered and replaced on the machine left, no VM object is stuck", async () => {
    // Every idle runner is on the second machine: the job lands there.
    const job = github.queueJob({ repo: REPO, labels: [POOL], steps: [{ name: "long", run: "echo begun; sleep 600" }], name: "vanished" });
    await waitFor(`job ${job.name} running`, () => (job.status !== "queued" ? job : undefined), { timeoutMs: 120_000, intervalMs: 200 });
    const vm = await vms.get({ namespace: NS, name: job.runnerName ?? "" });
    assert.equal(vm.status?.nodeName, nodeBName, `the job runs on ${nodeBName}`);
    const onB = (await vms.list({ namespace: NS })).items.filter((v) => v.status?.nodeName === nodeBName).map((v) => v.metadata.name ?? "");
    const operatorWasThere = (await operatorNode()) === nodeBName;
    const diedAt = Date.now();
    const killedNode = await nodeB.vanish();
    const killedVms = await killCgroupTree(`imp/${nodeBName}`);
    // What a cloud's node controller does for a machine that is gone.
    await kubectl(["delete", "node", nodeBName, "--wait=false"]);
    const vmState = async (): Promise<string> => JSON.stringify((await vms.list({ namespace: NS })).items.map((v) => [v.metadata.name, v.status?.nodeName, v.status?.phase, v.status?.reason, v.metadata.finalizers]));
    // The operator may have died with the machine: Kubernetes replaces its Pod once the Node is gone
    // (the Pod garbage collector waits 40 s), and the new leader gives every node the full 40 s bound.
    const lostBound = (operatorWasThere ? 180_000 : 60_000) + 60_000;
    // Seen by its Event: the VM may be Failed, deregistered and deleted between two polls of it.
    const lost = await waitFor(`${vm.metadata.name ?? ""} Failed/NodeLost (its Event)`, async () => {
      const events = JSON.parse(await kubectl(["-n", NS, "get", "events", "--field-selector", `involvedObject.name=${vm.metadata.name ?? ""},reason=NodeLost`, "-o", "json"])) as { items: Array<{ message?: string; involvedObject: { uid?: string } }> };
      return events.items.find((e) => e.involvedObject.uid === vm.metadata.uid);
    }, { timeoutMs: lostBound, intervalMs: 500 }).catch(async (err: unknown) => {
      throw new Error(`${String(err)}\nVMs: ${await vmState()}\noperator:\n${await operatorLogs()}`);
    });
    const lostAfter = Date.now() - diedAt;
    await waitJob(job, 120_000);
    assert.equal(job.conclusion, "failure", "the forge fails a job whose runner vanished");
    assert.match(job.result?.log ?? "", /lost communication/);
    // Deregistered (each once its runner was no longer busy), and no VM object of the machine left behind.
    await waitFor(`no runner and no VM of ${nodeBName} left`, async () => {
      const left = (await vms.list({ namespace: NS })).items.filter((v) => v.status?.nodeName === nodeBName);
      return left.length === 0 && onB.every((n) => github.runnerNamed(n) === undefined) ? true : undefined;
    }, { timeoutMs: 240_000, intervalMs: 500 }).catch(async (err: unknown) => {
      throw new Error(`${String(err)}\nregistered: ${onB.filter((n) => github.runnerNamed(n) !== undefined).join(", ")}\nVMs: ${await vmState()}\noperator:\n${await operatorLogs()}`);
    });
    const cleanAfter = Date.now() - diedAt;
    const replacement = await waitFor(`an idle runner online on ${nodeA}`, async () => (await idleOn(nodeA))[0], { timeoutMs: 300_000, intervalMs: 500 });
    say(`${nodeBName} vanished mid-job (${killedNode} node process(es) and ${killedVms} VM process(es) killed, its Node deleted${operatorWasThere ? "; the operator's Pod was on it" : ""}): ${vm.metadata.name ?? ""} Failed/NodeLost ${s(lostAfter)} later ("${lost.message ?? ""}"); the job ${job.conclusion ?? "?"} on the forge; its ${onB.length} runner(s) deregistered and VM objects gone ${s(cleanAfter)} after; replacement ${replacement.metadata.name ?? ""} online on ${nodeA}`);
  });

  it("helm uninstall with the pool and its VMs still there: its hook ends them and retires the node, leaving nothing of Imp but the state it was told to keep", async () => {
    const { left, ms, vmsEnded } = await uninstall(true);
    assert.deepEqual(left, [], "nothing of Imp in the cluster or on the node");
    assert.ok(vmsEnded > 0, "VMs were running when the uninstall began");
    say(`helm uninstall --wait with ${vmsEnded} VM(s) running: ${s(ms)} (the hook ended them, deregistered their runners and retired the node; state kept as asked)`);
  });

  it("installs again on the same node, its image cache warm, and leaves nothing once more", async () => {
    values = { ...values, uninstall: { keepNodeState: false } };
    const installMs = await install();
    const appliedAt = Date.now();
    await kubectl(["apply", "-f", "-"], poolYaml(NS, POOL, github.url, { minIdle: 1, maxConcurrent: 2, scaleSet: true }, 600, undefined));
    const vm = await waitFor("a runner VM online again", () => onlineRunner(), { timeoutMs: 600_000, intervalMs: 500 }).catch(async (err: unknown) => {
      throw new Error(`${String(err)}\nagent:\n${await agentLogs()}\noperator:\n${await operatorLogs()}`);
    });
    say(`warm image cache: helm install --wait ${s(installMs)}, first runner online ${s(Date.now() - appliedAt)} after the pool was applied (${vm.metadata.name ?? ""})`);
    const { left, ms, vmsEnded } = await uninstall(false);
    assert.deepEqual(left, [], "nothing of Imp in the cluster or on the node after the second uninstall, its state directory emptied");
    say(`helm uninstall --wait with ${vmsEnded} VM(s) running, state removed: ${s(ms)}`);
  });
});
