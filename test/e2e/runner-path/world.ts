/**
 * The whole runner path on one machine, with real parts: the local control plane (kube-apiserver,
 * etcd, controller-manager), `imp operator` and one `imp agent` per simulated node as their own
 * processes, a real OCI registry holding a base image and a runner layer, real QEMU booting the
 * guest kernel with the guest agent under the per-VM supervisor, and the GitHub test server standing
 * in for GitHub (the one stand-in; it holds every request to GitHub's OpenAPI description).
 *
 * The end-to-end test, the README demo and the fault suite all start this world; the fault suite
 * arms fault points in the operator and agents through their environment (IMP_TEST_FAULT_POINTS).
 */
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readdir, readFile, rm, rmdir, statfs, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { connect, createServer as createNetServer, type Socket } from "node:net";
import { API_VERSION, GITHUB_APP_SECRET_KEYS, type ImpNode, type ImpVM, type ImpVMRunnerPool, IMP_NODES, IMP_VMS, IMP_VM_RUNNER_POOLS, buildAllCrds } from "../../../src/api/index.ts";
import { freePort, startControlPlane, type ControlPlane } from "../../../src/devcluster/index.ts";
import { createResourceClient, Informer, type KubeObject, type ResourceClient, type Stored, asStored, installCrds } from "../../../src/kube/index.ts";
import { createLogger, waitFor } from "../../../src/shared/index.ts";
import { appKeyPair, APP_ID, INSTALLATION_ID } from "../../github/harness.ts";
import { GitHubTestServer, type JobStep, type TestJob } from "../../github/server.ts";
import { buildImage, buildLayer, busyboxLayer, type LayerEntry } from "../../harness/oci-image.ts";
import { guestAgentPath, processesMentioning, supervisorPath } from "../../harness/node-agent.ts";
import { GITEA_RUNNER_BIN, GiteaServer, giteaUnavailable } from "../../gitea/gitea-server.ts";
import { giteaRunnerLayer, rootfsLayer, rootfsUnavailable } from "../../harness/runner-images.ts";
import { IMP_SYSTEM, installRbac } from "../../harness/rbac.ts";
import { pushImage, startRegistry, type RunningRegistry } from "../../harness/registry.ts";
import { loadBootKit } from "../../harness/vm.ts";
import { loadGuestKernel } from "../../integration/bootkit/kernel-vm.ts";
import type { FaultWorld } from "../../fault/invariants.ts";
import { readNodeState, type SimulatedNode } from "../../fault/node-state.ts";
import { ImpProcess } from "./imp-process.ts";
import { SimNodes, simNodesUnavailable, type SimNodeNet } from "./sim-nodes.ts";

const execFileAsync = promisify(execFile);
const repoRoot = resolve(import.meta.dirname, "../../..");
const cacheDir = process.env.IMP_CACHE ?? join(repoRoot, ".cache");
export const testRunnerPath = join(cacheDir, "guest/imp-test-runner");

export const VMS = IMP_VMS;
export const POOLS = IMP_VM_RUNNER_POOLS;
export const NODES = IMP_NODES;
const SECRETS = { group: "", version: "v1", plural: "secrets", kind: "Secret", namespaced: true } as const;
const NAMESPACES = { group: "", version: "v1", plural: "namespaces", kind: "Namespace", namespaced: false } as const;

export const NAMESPACE = "ci";

export const nameOf = (vm: ImpVM): string => vm.metadata.name ?? "";
export const REPO = { owner: "acme", repo: "api" } as const;
/** The Gitea repository of worlds started with `gitea: true`: its workflows run on Gitea pools. */
export const GITEA_REPO = { owner: "acme", repo: "app" } as const;
export const RUNNER_LABELS = ["self-hosted", "imp"] as const;

export interface WorldNode {
  readonly name: string;
  readonly net: SimNodeNet;
  readonly stateDir: string;
  readonly cgroupParent: string;
  readonly agent: ImpProcess;
  /** The state dir is a filesystem of its own (WorldOptions.nodeDiskBytes), unmounted by dispose. */
  readonly ownDisk: boolean;
}

export interface WorldOptions {
  /** Simulated nodes; default 2. */
  readonly nodes?: number;
  /** VM slots per node; default 2. */
  readonly vmSlots?: number;
  /** Extra environment of the operator (a fault plan). */
  readonly operatorEnv?: Record<string, string>;
  /** Extra environment of every agent. */
  readonly agentEnv?: Record<string, string>;
  /** Seconds an idle runner waits for a job before it gives up (the real runner waits for ever). */
  readonly runnerIdleSeconds?: number;
  /** Progress lines (the demo prints them). */
  readonly say?: (line: string) => void;
  /**
   * Gives each node's state dir (image cache and VM disks, one filesystem as on a real node) a
   * filesystem of its own of this size, an ext4 on a loop device backed by a sparse file, so a case
   * can fill a node's disk without touching the machine's. Default: the state dirs live on /tmp.
   */
  readonly nodeDiskBytes?: number;
  /**
   * Also a real Gitea (organization acme, repository app) on an address the VMs reach, the Gitea
   * runner image in the registry, and in every namespace the Gitea token Secret and the
   * `gitea-runner` template, for Gitea pools (applyGiteaPool).
   */
  readonly gitea?: boolean;
  /**
   * Also the Docker runner image (images/docker-runner: Debian 12, docker.io, the `runner` user,
   * this world's runner program) in the registry, the `runner-docker` class and, in every namespace,
   * the `docker-runner` template; the registry is reachable from the VMs through a forwarder on the
   * forge's address (`registryForVms`) for `docker pull`. Pools with `docker: true` use them.
   */
  readonly docker?: boolean;
}

/** Why this machine cannot run the world, or undefined when it can. */
export async function worldUnavailable(): Promise<string | undefined> {
  const net = await simNodesUnavailable();
  if (net !== undefined) return net;
  try {
    await loadBootKit();
  } catch (err) {
    return `no boot kit: ${(err as Error).message}`;
  }
  for (const [what, path] of [["guest agent", guestAgentPath], ["supervisor", supervisorPath], ["test runner", testRunnerPath]] as const) {
    if (!existsSync(path)) return `the ${what} is missing at ${path}: run scripts/setup.sh`;
  }
  return undefined;
}

/** The kubeconfig of node `node`'s agent: a token bound to its agent Pod object, naming the node. */
export const agentKubeconfigOf = (root: string, node: string): string => join(root, `imp-agent-${node}.kubeconfig`);

/** Why this machine cannot run a world with the Docker runner image (`docker: true`), or undefined when it can. */
export async function dockerWorldUnavailable(): Promise<string | undefined> {
  return (await worldUnavailable()) ?? rootfsUnavailable("docker-runner");
}

/** Why this machine cannot run a world with Gitea (`gitea: true`), or undefined when it can. */
export async function giteaWorldUnavailable(): Promise<string | undefined> {
  return (await worldUnavailable()) ?? giteaUnavailable() ?? rootfsUnavailable("gitea-runner");
}

/** The runner layer: the test runner program at /runner, plus `extra` entries (a case's own variant). */
export async function runnerLayer(extra: readonly LayerEntry[] = []): Promise<Awaited<ReturnType<typeof buildLayer>>> {
  return buildLayer([
    { path: "runner/", type: "directory" },
    { path: "runner/imp-test-runner", content: await readFile(testRunnerPath), mode: 0o755 },
    // The real runner's entry point; the setup arrives on stdin (delivery Stdin) or as ACTIONS_RUNNER_INPUT_JITCONFIG.
    { path: "runner/run.sh", content: '#!/bin/sh\nexec /runner/imp-test-runner "$@"\n', mode: 0o755 },
    ...extra,
  ]);
}

/** The guest kernel the agents boot: Imp's own when setup built it (faster), else Debian's + initramfs. */
async function kernelConfig(): Promise<{ kernel: string; initrd?: string; args: string[]; label: string }> {
  const own = await loadGuestKernel();
  if (own !== undefined) return { kernel: own.bzImage, args: ["console=ttyS0", "quiet", "rootfstype=ext4", "rootflags=noload"], label: `Imp's kernel ${own.release}` };
  const kit = await loadBootKit();
  return { kernel: kit.kernel, initrd: kit.initrd, args: ["console=ttyS0", "quiet"], label: `Debian's kernel ${kit.kernelRelease} + initramfs` };
}

export interface VmHistory {
  /** Phases in the order they were first seen. */
  readonly phases: string[];
  last: Stored<ImpVM>;
  readonly firstSeenAt: number;
  goneAt: number | undefined;
}

interface WorldParts {
  readonly root: string;
  readonly plane: ControlPlane;
  readonly registry: RunningRegistry;
  readonly github: GitHubTestServer;
  readonly githubPrivateKey: string;
  readonly sim: SimNodes;
  readonly kernelLabel: string;
  readonly baseImage: string;
  readonly runnerImage: string;
  readonly webhookUrl: string;
  readonly webhookSecret: string;
  readonly gitea: GiteaServer | undefined;
  readonly giteaImage: string | undefined;
  readonly dockerImage: string | undefined;
  readonly giteaDockerImage: string | undefined;
  readonly registryForwarder: TcpForwarder | undefined;
  readonly operatorKubeconfigPath: string;
  readonly agentKubeconfigPath: string;
  readonly say: (line: string) => void;
}

/** A job's statuses in the order GitHub moves it through them. */
const JOB_ORDER: ReadonlyArray<TestJob["status"]> = ["queued", "in_progress", "completed"];

export class RunnerWorld {
  readonly root: string;
  readonly plane: ControlPlane;
  readonly registry: RunningRegistry;
  readonly github: GitHubTestServer;
  readonly githubPrivateKey: string;
  readonly sim: SimNodes;
  readonly kernelLabel: string;
  readonly baseImage: string;
  readonly runnerImage: string;
  /** Where the operator receives GitHub's webhooks. */
  readonly webhookUrl: string;
  /** The real Gitea, in worlds started with `gitea: true`. */
  readonly gitea: GiteaServer | undefined;
  readonly giteaImage: string | undefined;
  /** The Docker runner image, and the registry's address as the VMs reach it (worlds with `docker: true`). */
  readonly dockerImage: string | undefined;
  /** The Docker runner image with gitea-runner (worlds with `gitea: true, docker: true`). */
  readonly giteaDockerImage: string | undefined;
  readonly registryForVms: string | undefined;
  /**
   * Kubeconfigs holding a token of the imp-operator and imp-agent ServiceAccounts of deploy/rbac:
   * the operator and agents run with exactly the permissions a cluster install grants them.
   */
  readonly operatorKubeconfigPath: string;
  readonly agentKubeconfigPath: string;
  readonly say: (line: string) => void;
  readonly nodes: WorldNode[] = [];
  readonly #webhookSecret: string;
  /** The Gitea pools' webhook secret (Secret gitea-webhook in every namespace). */
  readonly #giteaWebhookSecret = `gitea-whsec-${Math.random().toString(36).slice(2)}`;
  readonly vms: ResourceClient<ImpVM>;
  readonly pools: ResourceClient<ImpVMRunnerPool>;
  readonly impNodes: ResourceClient<ImpNode>;
  readonly secrets: ResourceClient<KubeObject & { data?: Record<string, string> }>;
  #operator: ImpProcess | undefined;
  #disposed = false;
  readonly #registryForwarder: TcpForwarder | undefined;
  readonly #seen = new Map<string, VmHistory>();
  readonly #watching = new AbortController();
  #runnerIdleSeconds = 600;

  private constructor(parts: WorldParts) {
    this.root = parts.root;
    this.plane = parts.plane;
    this.registry = parts.registry;
    this.github = parts.github;
    this.githubPrivateKey = parts.githubPrivateKey;
    this.sim = parts.sim;
    this.kernelLabel = parts.kernelLabel;
    this.baseImage = parts.baseImage;
    this.runnerImage = parts.runnerImage;
    this.webhookUrl = parts.webhookUrl;
    this.gitea = parts.gitea;
    this.giteaImage = parts.giteaImage;
    this.dockerImage = parts.dockerImage;
    this.giteaDockerImage = parts.giteaDockerImage;
    this.registryForVms = parts.registryForwarder?.address;
    this.#registryForwarder = parts.registryForwarder;
    this.#webhookSecret = parts.webhookSecret;
    this.operatorKubeconfigPath = parts.operatorKubeconfigPath;
    this.agentKubeconfigPath = parts.agentKubeconfigPath;
    this.say = parts.say;
    this.vms = createResourceClient<ImpVM>(parts.plane.kubeConfig, VMS);
    this.pools = createResourceClient<ImpVMRunnerPool>(parts.plane.kubeConfig, POOLS);
    this.impNodes = createResourceClient<ImpNode>(parts.plane.kubeConfig, NODES);
    this.secrets = createResourceClient<KubeObject & { data?: Record<string, string> }>(parts.plane.kubeConfig, SECRETS);
  }

  /**
   * Every VM this world has seen, with each phase it was seen in and its last state: a VM the pool
   * replaces can be deleted moments after it ended, before a test's wait would look again.
   */
  history(name: string): VmHistory | undefined {
    return this.#seen.get(name);
  }

  get seenVms(): ReadonlyMap<string, VmHistory> {
    return this.#seen;
  }

  /** A VM's phases as this world saw them, and why it ended if it failed: what explains a second VM for one job. */
  describeVm(name: string): string {
    const h = this.#seen.get(name);
    if (h === undefined) return `${name} (?)`;
    const why = h.last.status?.phase === "Failed" ? `; ${h.last.status.reason ?? "?"}: ${(h.last.status.message ?? "").slice(0, 300)}` : "";
    const runner = h.last.status?.runner?.name === undefined ? "" : `, runner ${h.last.status.runner.name}`;
    return `${name} (${h.phases.join(" → ")}${why}${runner})`;
  }

  /** Follows every VM through a watch (an informer), so no phase is missed, however short. */
  #watch(): void {
    const record = (vm: Stored<ImpVM>): void => {
      const name = nameOf(vm);
      const h = this.#seen.get(name) ?? { phases: [], last: vm, firstSeenAt: Date.now(), goneAt: undefined };
      const phase = vm.status?.phase ?? "";
      if (phase !== "" && !h.phases.includes(phase)) h.phases.push(phase);
      h.last = vm;
      this.#seen.set(name, h);
    };
    const informer = new Informer<ImpVM>({ client: this.vms, logger: createLogger({ level: "silent" }) });
    informer.addEventHandler({
      onAdd: (vm) => record(vm as Stored<ImpVM>),
      onUpdate: (_old, vm) => record(vm as Stored<ImpVM>),
      onDelete: (vm) => {
        record(vm as Stored<ImpVM>);
        const h = this.#seen.get(nameOf(vm as Stored<ImpVM>));
        if (h !== undefined) h.goneAt ??= Date.now();
      },
    });
    void informer.start(this.#watching.signal).catch(() => undefined);
  }

  get operator(): ImpProcess {
    if (this.#operator === undefined) throw new Error("the operator has not been started");
    return this.#operator;
  }

  static async start(options: WorldOptions = {}): Promise<RunnerWorld> {
    const say = options.say ?? ((): void => undefined);
    const root = await mkdtemp(join(tmpdir(), "imp-e2e-"));
    const cleanups: Array<() => Promise<unknown>> = [async () => rm(root, { recursive: true, force: true })];
    const undo = async (): Promise<void> => {
      for (const c of cleanups.reverse()) await c().catch(() => undefined);
    };
    try {
      const plane = await startControlPlane({ controllerManager: true });
      cleanups.push(() => plane.stop());
      await installCrds(plane.kubeConfig, buildAllCrds());
      const operatorKubeconfigPath = join(root, "imp-operator.kubeconfig");
      const agentKubeconfigPath = join(root, "imp-agent.kubeconfig");
      const nodeNames = Array.from({ length: options.nodes ?? 2 }, (_, i) => `node-${String.fromCharCode(97 + i)}`);
      // Each agent holds its own node's token (deploy/rbac's admission policy allows it only that node's objects).
      await installRbac(plane, { "imp-operator": operatorKubeconfigPath }, Object.fromEntries(nodeNames.map((n) => [n, agentKubeconfigOf(root, n)])));
      say(`control plane up (kube-apiserver ${plane.server}) in ${(plane.startupMs / 1000).toFixed(1)} s; CRDs and deploy/rbac installed (the operator and agents run as ServiceAccounts imp-operator and imp-agent)`);

      const registry = await startRegistry();
      cleanups.push(() => registry.stop());
      await pushImage(registry.url, "ci/base", "1", buildImage([await busyboxLayer()]));
      await pushImage(registry.url, "ci/runner", "1", buildImage([await runnerLayer()]));
      const baseImage = `${registry.host}/ci/base:1`;
      const runnerImage = `${registry.host}/ci/runner:1`;
      say(`registry up at ${registry.host}: ${baseImage} (busybox) and ${runnerImage} (runner layer)`);

      const sim = new SimNodes();
      cleanups.push(() => sim.dispose());
      for (const name of nodeNames) await sim.add(name);

      const keys = appKeyPair();
      // Scale-set timings for a test: a long poll of 5 s, a dead listener's session expiring after 20 s,
      // and no re-offer of acquired jobs while VMs boot slowly under TCG.
      const actionsService = { queuePollMs: 5_000, sessionIdleMs: 20_000, reassignAfterMs: 600_000 };
      const github = await new GitHubTestServer({ appId: APP_ID, installationId: INSTALLATION_ID, appPublicKey: keys.publicKey, host: sim.serviceAddress, actionsService }).start();
      cleanups.push(() => github.stop());
      say(`GitHub test server at ${github.url} (reachable from the VMs of every node)`);

      const webhookSecret = `whsec-${Math.random().toString(36).slice(2)}`;
      let gitea: GiteaServer | undefined;
      let giteaImage: string | undefined;
      if (options.gitea === true) {
        gitea = await GiteaServer.start({ host: sim.serviceAddress });
        const g = gitea;
        cleanups.push(() => g.stop());
        await gitea.createOrg(GITEA_REPO.owner);
        await gitea.createRepo(GITEA_REPO.owner, GITEA_REPO.repo);
        await pushImage(registry.url, "ci/gitea-runner", "1", buildImage([await rootfsLayer("gitea-runner"), await giteaRunnerLayer(GITEA_RUNNER_BIN)]));
        giteaImage = `${registry.host}/ci/gitea-runner:1`;
        say(`Gitea 1.27.3 at ${gitea.url} (organization ${GITEA_REPO.owner}, repository ${GITEA_REPO.repo}); ${giteaImage}: Debian 12 + gitea-runner v1.0.8`);
      }
      let dockerImage: string | undefined;
      let giteaDockerImage: string | undefined;
      let registryForwarder: TcpForwarder | undefined;
      if (options.docker === true) {
        const t0 = Date.now();
        await pushImage(registry.url, "ci/docker-runner", "1", buildImage([await rootfsLayer("docker-runner"), await dockerRunnerLayer()]));
        dockerImage = `${registry.host}/ci/docker-runner:1`;
        const forward = await forwardTcp(sim.serviceAddress, new URL(registry.url));
        cleanups.push(() => forward.close());
        registryForwarder = forward;
        say(`${dockerImage}: Debian 12 + docker.io + the runner user, pushed in ${((Date.now() - t0) / 1000).toFixed(1)} s; the registry is at ${forward.address} for the VMs' docker`);
        if (gitea !== undefined) {
          await pushImage(registry.url, "ci/gitea-docker-runner", "1", buildImage([await rootfsLayer("docker-runner"), await giteaDockerRunnerLayer(GITEA_RUNNER_BIN)]));
          giteaDockerImage = `${registry.host}/ci/gitea-docker-runner:1`;
          say(`${giteaDockerImage}: the Docker runner image with gitea-runner as its runner program`);
        }
      }

      const kernel = await kernelConfig();
      const kit = await loadBootKit();
      const webhookPort = await freePort();
      const world = new RunnerWorld({ root, plane, registry, github, githubPrivateKey: keys.privateKey, sim, kernelLabel: kernel.label, baseImage, runnerImage, webhookUrl: `http://127.0.0.1:${webhookPort}/webhooks/github`, webhookSecret, gitea, giteaImage, dockerImage, giteaDockerImage, registryForwarder, operatorKubeconfigPath, agentKubeconfigPath, say });
      // From here the world's own dispose removes everything, the processes it started included.
      cleanups.splice(0, cleanups.length, async () => world.dispose());
      github.webhooks.target = { url: world.webhookUrl, secret: webhookSecret };
      await world.kubectl(["apply", "-f", "-"], classYaml());
      await world.kubectl(["apply", "-f", "-"], snapshotClassYaml(classYaml(), "runner-small"));
      if (dockerImage !== undefined) {
        await world.kubectl(["apply", "-f", "-"], dockerClassYaml());
        await world.kubectl(["apply", "-f", "-"], snapshotClassYaml(dockerClassYaml(), "runner-docker"));
      }
      await world.addNamespace(NAMESPACE);
      world.#runnerIdleSeconds = options.runnerIdleSeconds ?? 600;

      const operator = new ImpProcess("imp operator", world.operatorArgs(webhookPort), join(root, "operator.log"), options.operatorEnv);
      world.#operator = operator;
      await operator.start();

      for (const net of sim.nodes) {
        const stateDir = join(root, net.nodeName);
        await mkdir(stateDir, { recursive: true });
        const ownDisk = options.nodeDiskBytes !== undefined;
        if (ownDisk) {
          // ext4 as on a node (the scratch disks need FIEMAP, which tmpfs lacks), no blocks reserved
          // for root (the agent is root: a reserve would hide the full disk from it), sparse on /tmp.
          const image = join(root, `${net.nodeName}.disk`);
          await execFileAsync("truncate", ["-s", String(options.nodeDiskBytes), image], { timeout: 30_000 });
          await execFileAsync("mkfs.ext4", ["-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1", image], { timeout: 120_000 });
          await execFileAsync("mount", ["-o", "loop", image, stateDir], { timeout: 60_000 });
        }
        // Per run: the sweep removes VM cgroups under its parent that are not its own, so two worlds
        // on one machine (the end-to-end and fault suites in parallel) must never share one.
        const cgroupParent = `imp/${sim.prefix}-${net.nodeName}`;
        const config = {
          nodeName: net.nodeName,
          stateDir,
          leaseNamespace: IMP_SYSTEM,
          capacity: { vcpu: 4, memoryMiB: 4096, vmSlots: options.vmSlots ?? 2 },
          accel: "auto",
          vmm: "qemu",
          qemu: { binary: "qemu-system-x86_64", ...(kit.vhostDeviceVsock === null ? {} : { vhostDeviceVsock: kit.vhostDeviceVsock }) },
          kernels: { default: { kernel: kernel.kernel, ...(kernel.initrd === undefined ? {} : { initrd: kernel.initrd }), args: kernel.args } },
          guestAgent: guestAgentPath,
          imageCacheMaxBytes: 2 * 1024 ** 3,
          // Egress `internet` refuses non-public addresses, as on a real node; this world's GitHub
          // (and Gitea) stand on one (the benchmarking range), so the node allow-lists exactly their ports.
          network: { uplink: net.uplink, netns: net.netns, allowedCIDRs: [github.url, ...(gitea === undefined ? [] : [gitea.url]), ...(registryForwarder === undefined ? [] : [`http://${registryForwarder.address}`])].map((u) => `${sim.serviceAddress}:${new URL(u).port}`) },
          healthPort: 0,
          supervised: true,
          supervisorBinary: supervisorPath,
          cgroupParent,
          sweepIntervalSeconds: 10,
        };
        const configPath = join(root, `${net.nodeName}.agent.json`);
        await writeFile(configPath, JSON.stringify(config, null, 2));
        const agent = new ImpProcess(`imp agent ${net.nodeName}`, ["agent", "--config", configPath, "--kubeconfig", agentKubeconfigOf(root, net.nodeName), "--log-level", "debug"], join(root, `${net.nodeName}.agent.log`), options.agentEnv);
        world.nodes.push({ name: net.nodeName, net, stateDir, cgroupParent, agent, ownDisk });
        await agent.start();
      }
      await Promise.all(
        world.nodes.map((node) =>
          waitFor(`ImpNode ${node.name} published with its setup key`, async () => {
            if (!node.agent.running) throw new Error(`${node.agent.name} exited: ${await node.agent.exited()}\n${node.agent.tail()}`);
            const published = await world.impNodes.get({ name: node.name }).catch(() => undefined);
            return published?.status?.setupKey !== undefined ? published : undefined;
          }, { timeoutMs: 120_000, intervalMs: 200 }),
        ),
      );
      const accel = (await world.impNodes.get({ name: world.nodes[0]?.name ?? "" })).status;
      world.#watch();
      say(`imp operator and ${world.nodes.length} imp agents up (${world.nodes.map((n) => `${n.name}: netns ${n.net.netns}`).join(", ")}); accel ${accel?.accel ?? "?"} (${accel?.kvmReason ?? ""}); kernel: ${kernel.label}`);
      return world;
    } catch (err) {
      await undo();
      throw err;
    }
  }

  /** `imp operator`'s arguments as a cluster install would run it (its ServiceAccount, Leases in imp-system). */
  operatorArgs(webhookPort: number): string[] {
    return ["operator", "--kubeconfig", this.operatorKubeconfigPath, "--lease-namespace", IMP_SYSTEM, "--agent-lease-namespace", IMP_SYSTEM, "--webhook-port", String(webhookPort), "--health-port", "0", "--scale-set-conflict-retry", "2", "--log-level", "debug"];
  }

  /** A namespace for runner pools: the GitHub App's credentials Secret and the runner template in it. */
  async addNamespace(namespace: string): Promise<void> {
    await createResourceClient<KubeObject>(this.plane.kubeConfig, NAMESPACES).create({ apiVersion: "v1", kind: "Namespace", metadata: { name: namespace } });
    const b64 = (v: string): string => Buffer.from(v).toString("base64");
    await this.secrets.create({
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "github-app", namespace },
      data: { [GITHUB_APP_SECRET_KEYS.appId]: b64(String(APP_ID)), [GITHUB_APP_SECRET_KEYS.installationId]: b64(String(INSTALLATION_ID)), [GITHUB_APP_SECRET_KEYS.privateKey]: b64(this.githubPrivateKey) },
    } as KubeObject);
    // The pools' webhook secret (spec.webhook.secretRef): a pool counts queued jobs from webhooks only with it.
    await this.secrets.create({ apiVersion: "v1", kind: "Secret", metadata: { name: "github-webhook", namespace }, data: { secret: b64(this.#webhookSecret) } } as KubeObject);
    await this.kubectl(["apply", "-f", "-"], templateYaml(namespace, this.baseImage, this.runnerImage));
    await this.kubectl(["apply", "-f", "-"], templateYaml(namespace, this.baseImage, this.runnerImage).replace("name: runner\n", "name: runner-snapshot\n").replace("name: runner-small\n", "name: runner-small-snapshot\n"));
    if (this.dockerImage !== undefined) {
      await this.kubectl(["apply", "-f", "-"], imageTemplateYaml(namespace, "docker-runner", "runner-docker", this.dockerImage));
      await this.kubectl(["apply", "-f", "-"], imageTemplateYaml(namespace, "docker-runner-snapshot", "runner-docker-snapshot", this.dockerImage));
    }
    if (this.gitea !== undefined && this.giteaImage !== undefined) {
      await this.secrets.create({ apiVersion: "v1", kind: "Secret", metadata: { name: "gitea-token", namespace }, data: { token: b64(this.gitea.token) } } as KubeObject);
      // Gitea pools' own webhook secret: the operator trusts no other for a Gitea delivery.
      await this.secrets.create({ apiVersion: "v1", kind: "Secret", metadata: { name: "gitea-webhook", namespace }, data: { secret: b64(this.#giteaWebhookSecret) } } as KubeObject);
      await this.kubectl(["apply", "-f", "-"], imageTemplateYaml(namespace, "gitea-runner", "runner-small", this.giteaImage));
      await this.kubectl(["apply", "-f", "-"], imageTemplateYaml(namespace, "gitea-runner-snapshot", "runner-small-snapshot", this.giteaImage));
      if (this.giteaDockerImage !== undefined) {
        await this.kubectl(["apply", "-f", "-"], imageTemplateYaml(namespace, "gitea-docker-runner", "runner-docker", this.giteaDockerImage));
        await this.kubectl(["apply", "-f", "-"], imageTemplateYaml(namespace, "gitea-docker-runner-snapshot", "runner-docker-snapshot", this.giteaDockerImage));
      }
    }
  }

  /** Stops the operator (SIGTERM) if it runs and starts it again; `env` replaces its extra environment (a fault plan, or {}). */
  async restartOperator(env?: Record<string, string>): Promise<void> {
    await this.operator.stop();
    await this.operator.start(env);
  }

  /** The same for one node's agent (its VMs keep running under their supervisors). */
  async restartAgent(node: WorldNode, env?: Record<string, string>): Promise<void> {
    await node.agent.stop();
    await node.agent.start(env);
  }

  async kubectl(args: readonly string[], input?: string): Promise<string> {
    const child = execFileAsync(this.plane.binaries.kubectl, ["--kubeconfig", this.plane.kubeconfigPath, ...args], { timeout: 60_000, maxBuffer: 8 << 20 });
    if (input !== undefined) {
      child.child.stdin?.end(input);
    }
    const { stdout } = await child;
    return stdout;
  }

  /** `kubectl apply` of a runner pool for the test repository. */
  async applyPool(name: string, spec: PoolShape, namespace = NAMESPACE): Promise<string> {
    return this.kubectl(["apply", "-f", "-"], poolYaml(namespace, name, this.github.url, spec, this.#runnerIdleSeconds, this.registryForVms));
  }

  /** `kubectl apply` of a Gitea runner pool for the Gitea repository (worlds started with `gitea: true`). */
  async applyGiteaPool(name: string, spec: GiteaPoolShape, namespace = NAMESPACE, repository = `${GITEA_REPO.owner}/${GITEA_REPO.repo}`): Promise<string> {
    if (this.gitea === undefined) throw new Error("this world has no Gitea: start it with { gitea: true }");
    if (spec.docker === true && this.giteaDockerImage === undefined) throw new Error("this world has no Docker runner image: start it with { gitea: true, docker: true }");
    return this.kubectl(["apply", "-f", "-"], giteaPoolYaml(namespace, name, this.gitea.url, spec, repository, this.registryForVms));
  }

  /**
   * Makes Gitea send the repository's workflow_job webhooks to the operator (`/webhooks/gitea`),
   * signed with the Gitea pools' secret; `url` sends them elsewhere instead (a fault case's lost
   * deliveries). Returns the hook's id.
   */
  async hookGitea(owner: string, repo: string, url = this.webhookUrl.replace(/\/webhooks\/github$/, "/webhooks/gitea")): Promise<number> {
    if (this.gitea === undefined) throw new Error("this world has no Gitea: start it with { gitea: true }");
    const hook = await this.gitea.api<{ id: number }>("POST", `/repos/${owner}/${repo}/hooks`, { type: "gitea", active: true, events: ["workflow_job"], config: { url, content_type: "json", secret: this.#giteaWebhookSecret } });
    return hook.id;
  }

  /** Queues a job for runners with `labels` (default the pools' default labels). */
  queueJob(name: string, steps: readonly JobStep[], labels: readonly string[] = RUNNER_LABELS): TestJob {
    return this.github.queueJob({ repo: REPO, labels: [...labels], steps, name });
  }

  /** VMs of every namespace (or of one pool). */
  async listVms(pool?: string): Promise<Stored<ImpVM>[]> {
    const all = (await this.vms.list()).items;
    return pool === undefined ? [...all] : all.filter((vm) => vm.metadata.labels?.["imp.dev/pool"] === pool || vm.metadata.ownerReferences?.some((o) => o.kind === "ImpVMRunnerPool" && o.name === pool));
  }

  getVm(name: string, namespace = NAMESPACE): Promise<Stored<ImpVM> | undefined> {
    return this.vms.get({ namespace, name }).catch(() => undefined);
  }

  /** Waits until `check` holds for some VM; fails early, with the logs, if a part of the world died. */
  async waitForVm(what: string, check: (vms: Stored<ImpVM>[]) => ImpVM | undefined, timeoutMs = 300_000): Promise<Stored<ImpVM>> {
    return waitFor(what, async () => {
      this.#assertAlive();
      const found = check(await this.listVms());
      return found === undefined ? undefined : asStored(found, VMS);
    }, { timeoutMs, intervalMs: 200 }).catch((err: unknown) => Promise.reject(this.#withLogs(err)));
  }

  /** waitFor that fails early if a process of the world died, and says what the processes last logged. */
  async waitUntil<T>(what: string, check: () => Promise<T | undefined> | T | undefined, timeoutMs = 300_000, intervalMs = 200): Promise<T> {
    return waitFor(what, async () => {
      this.#assertAlive();
      return check();
    }, { timeoutMs, intervalMs }).catch((err: unknown) => Promise.reject(this.#withLogs(err)));
  }

  /**
   * Waits until the job has reached `status` or gone past it: a short job can go from queued through
   * in_progress to completed between two polls, and has then still been in progress.
   */
  async waitForJob(job: TestJob, status: TestJob["status"], timeoutMs = 300_000): Promise<TestJob> {
    return waitFor(`job ${job.name} ${status}`, () => {
      this.#assertAlive();
      return JOB_ORDER.indexOf(job.status) >= JOB_ORDER.indexOf(status) ? job : undefined;
    }, { timeoutMs, intervalMs: 100 }).catch(async (err: unknown) => Promise.reject(this.#withLogs(err, await this.#jobDiagnosis(job))));
  }

  /** Who could have taken a job that did not move: the job, every runner GitHub knows, every VM. */
  async #jobDiagnosis(job: TestJob): Promise<string> {
    const now = Date.now();
    const ago = (t: number | undefined): string => (t === undefined ? "-" : `${((now - t) / 1000).toFixed(1)} s ago`);
    const runners = [...this.github.runners.values()].map(
      (r) => `${r.name} id ${r.id} ${r.status}${r.busy ? " busy" : ""} session ${r.session === undefined ? "none" : "open"} job ${r.jobId ?? "-"} seen ${ago(r.seenUntil)} labels ${r.labels.map((l) => l.name).join(",")} scope ${r.scopeKey}`,
    );
    const vms = await this.listVms().catch(() => []);
    return [
      `--- job ${job.name} (id ${job.id}): ${job.status}, labels ${job.labels.join(",")}, repo ${job.repo.owner}/${job.repo.repo}, queued ${ago(job.queuedAt)}, runner ${job.runnerName ?? "-"} ---`,
      `--- GitHub runners (${runners.length}) ---`,
      ...runners,
      `--- VMs (${vms.length}) ---`,
      // Whether the guest answered (bootDurationMs) and where its setup is tell a boot that hangs from a setup never handed over.
      ...vms.map((vm) => `${vm.metadata.namespace ?? ""}/${nameOf(vm)} ${vm.status?.phase ?? "Pending"}${vm.metadata.deletionTimestamp === undefined ? "" : " deleting"} node ${vm.status?.nodeName ?? "-"} ${vm.status?.reason ?? ""} guest ${vm.status?.bootDurationMs === undefined ? "not answered" : `answered after ${vm.status.bootDurationMs} ms`} setup ${vm.status?.setup?.state ?? "none"}${vm.status?.setup?.sealed === undefined ? "" : " (sealed in status)"}`),
      ...(await Promise.all(vms.filter((vm) => vm.status?.phase === "Booting" && vm.status.bootDurationMs === undefined).map((vm) => this.#consoleTail(vm)))),
    ].join("\n");
  }

  /** The end of a VM's serial console: where a guest that never answered stopped. */
  async #consoleTail(vm: ImpVM): Promise<string> {
    const node = this.nodes.find((n) => n.name === vm.status?.nodeName);
    const path = node === undefined ? undefined : join(node.stateDir, "vms", vm.metadata.uid ?? "-", "vmm", "serial.log");
    const text = path === undefined ? "" : await readFile(path, "utf8").catch((err: unknown) => `(no console: ${String(err)})`);
    return `--- console of ${nameOf(vm)} (guest not answered), last 3000 bytes ---\n${text.slice(-3000)}`;
  }

  nodeOf(vm: ImpVM): WorldNode {
    const node = this.nodes.find((n) => n.name === vm.status?.nodeName);
    if (node === undefined) throw new Error(`VM ${nameOf(vm)} is on no node of this world (${vm.status?.nodeName ?? "unbound"})`);
    return node;
  }

  /** What of a VM remains on its node's host: processes, sockets, taps, cgroups, disks and its directory. */
  async leftoversOf(node: WorldNode, uid: string): Promise<string[]> {
    return (await readNodeState(this.simulatedNode(node), { uid })).map((r) => `${r.kind} ${r.detail}`);
  }

  /** A node as the fault suite's checker reads it (test/fault/node-state.ts); the agent's own pid is never a VM's. */
  simulatedNode(node: WorldNode): SimulatedNode {
    return { nodeName: node.name, stateDir: node.stateDir, netns: node.net.netns, cgroupParent: node.cgroupParent, agentPids: node.agent.pid === undefined ? [] : [node.agent.pid] };
  }

  /** The world as the invariant checker sees one namespace of it. */
  faultWorld(namespace: string): FaultWorld {
    const gitea = this.gitea;
    return {
      kubeConfig: this.plane.kubeConfig,
      namespace,
      github: this.github,
      nodes: this.nodes.map((n) => this.simulatedNode(n)),
      ...(gitea === undefined ? {} : { forgeRunners: async () => (await gitea.runners("/admin")).map((r) => ({ ...r, status: r.status === "online" ? "online" : "offline" })) }),
    };
  }

  #assertAlive(): void {
    if (this.#operator?.running === false) throw new Error(`imp operator exited:\n${this.operator.tail()}`);
    for (const node of this.nodes) if (!node.agent.running) throw new Error(`${node.agent.name} exited:\n${node.agent.tail()}`);
  }

  #withLogs(err: unknown, diagnosis = ""): Error {
    const logs = [...(this.#operator === undefined ? [] : [this.#operator]), ...this.nodes.map((n) => n.agent)].map((p) => `--- ${p.name} (last lines) ---\n${p.tail(25)}`).join("\n");
    return new Error(`${(err as Error).message}${diagnosis === "" ? "" : `\n${diagnosis}`}\n${logs}`, { cause: err });
  }

  /**
   * Deletes the pools (the operator removes registrations, the agents tear the VMs down), stops
   * every process, and removes everything of this world from the machine. Idempotent. Returns what
   * of the world is still on the machine afterwards (namespaces, links, processes, cgroups): nothing.
   */
  async dispose(): Promise<string[]> {
    if (this.#disposed) return this.leftoversOnHost();
    this.#disposed = true;
    this.#watching.abort();
    if (this.#operator?.running === true && this.nodes.every((n) => n.agent.running)) {
      await this.kubectl(["delete", "impvmrunnerpool", "--all", "--all-namespaces", "--wait=false"]).catch(() => "");
      await waitFor("every VM gone", async () => ((await this.listVms().catch(() => [])).length === 0 ? true : undefined), { timeoutMs: 120_000, intervalMs: 250 }).catch(() => undefined);
    }
    await this.#operator?.stop().catch(() => undefined);
    for (const node of this.nodes) await node.agent.stop().catch(() => undefined);
    // Supervised VMMs outlive their agent by design: remove whatever of this run is still running.
    for (const pid of await processesMentioning(this.root)) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // already gone
      }
    }
    for (const node of this.nodes) {
      for (const mount of ["/sys/fs/cgroup/memory", "/sys/fs/cgroup/unified"]) await removeCgroupTree(join(mount, node.cgroupParent));
    }
    await this.github?.stop().catch(() => undefined);
    await this.gitea?.stop().catch(() => undefined);
    await this.#registryForwarder?.close().catch(() => undefined);
    await this.sim?.dispose();
    await this.registry?.stop().catch(() => undefined);
    await this.plane?.stop().catch(() => undefined);
    for (const node of this.nodes.filter((n) => n.ownDisk)) {
      await execFileAsync("umount", [node.stateDir], { timeout: 30_000 }).catch(() => execFileAsync("umount", ["-l", node.stateDir], { timeout: 30_000 })).catch(() => undefined);
    }
    await rm(this.root, { recursive: true, force: true }).catch(() => undefined);
    return this.leftoversOnHost();
  }

  /** Pushes `ci/runner:<tag>`, the runner layer plus `extra` entries; returns its reference. */
  async pushRunnerVariant(tag: string, extra: readonly LayerEntry[]): Promise<string> {
    await pushImage(this.registry.url, "ci/runner", tag, buildImage([await runnerLayer(extra)]));
    return `${this.registry.host}/ci/runner:${tag}`;
  }

  /** Points the namespace's runner template at another runner layer image (a case's own). */
  async useRunnerImage(namespace: string, runnerImage: string): Promise<void> {
    await this.kubectl(["apply", "-f", "-"], templateYaml(namespace, this.baseImage, runnerImage));
  }

  /**
   * Fills the node's own filesystem (WorldOptions.nodeDiskBytes) until `leaveBytes` are free, with
   * one file; returns the undo (the file removed). Throws for a node on the machine's disk.
   */
  async fillDisk(node: WorldNode, leaveBytes: number): Promise<() => Promise<void>> {
    if (!node.ownDisk) throw new Error(`${node.name} has no filesystem of its own: start the world with nodeDiskBytes`);
    const filler = join(node.stateDir, "disk-filler");
    const free = await statfs(node.stateDir).then((st) => st.bavail * st.bsize);
    if (free > leaveBytes) await execFileAsync("fallocate", ["-l", String(free - leaveBytes), filler], { timeout: 60_000 });
    return () => rm(filler, { force: true });
  }

  async leftoversOnHost(): Promise<string[]> {
    const left = await this.sim.leftovers();
    for (const pid of await processesMentioning(this.root)) left.push(`process ${pid}`);
    const mounts = await readFile("/proc/self/mounts", "utf8").catch(() => "");
    for (const line of mounts.split("\n")) if (line.split(" ")[1]?.startsWith(this.root) === true) left.push(`mount ${line.split(" ")[1] ?? ""}`);
    for (const node of this.nodes) {
      for (const mount of ["/sys/fs/cgroup/memory", "/sys/fs/cgroup/unified"]) if (existsSync(join(mount, node.cgroupParent))) left.push(`cgroup ${join(mount, node.cgroupParent)}`);
    }
    if (existsSync(this.root)) left.push(`dir ${this.root}`);
    return left;
  }

}

/** rmdir of a cgroup and its children, deepest first (cgroup dirs cannot be removed recursively). */
async function removeCgroupTree(dir: string): Promise<void> {
  if (!existsSync(dir)) return;
  for (const entry of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
    if (entry.isDirectory()) await removeCgroupTree(join(dir, entry.name));
  }
  await rmdir(dir).catch(() => undefined);
}

export function classYaml(): string {
  return `apiVersion: ${API_VERSION}
kind: ImpVMClass
metadata:
  name: runner-small
spec:
  vcpu: 1
  memoryMiB: 384
  scratchDisk: 512Mi
  arch: amd64
`;
}

/** Class `name`'s shape as `<name>-snapshot`, its VMs restored from their node's memory snapshot (pools with `snapshot: true`). */
function snapshotClassYaml(yaml: string, name: string): string {
  return yaml.replace(`name: ${name}\n`, `name: ${name}-snapshot\n`).replace("arch: amd64\n", "arch: amd64\n  startFrom: Snapshot\n");
}

export function templateYaml(namespace: string, baseImage: string, runnerImage: string): string {
  return `apiVersion: ${API_VERSION}
kind: ImpVMTemplate
metadata:
  name: runner
  namespace: ${namespace}
spec:
  classRef:
    name: runner-small
  image: ${baseImage}
  extraLayers:
    - image: ${runnerImage}
  kernel: default
  network:
    egress: internet
  expireAfter: 1h
`;
}

function dockerClassYaml(): string {
  return `apiVersion: ${API_VERSION}
kind: ImpVMClass
metadata:
  name: runner-docker
spec:
  vcpu: 1
  memoryMiB: 1536
  scratchDisk: 8Gi
  arch: amd64
`;
}

/** A template `name` of one image (a runner image built from Debian packages) in class `className`. */
function imageTemplateYaml(namespace: string, name: string, className: string, image: string): string {
  return `apiVersion: ${API_VERSION}
kind: ImpVMTemplate
metadata:
  name: ${name}
  namespace: ${namespace}
spec:
  classRef:
    name: ${className}
  image: ${image}
  kernel: default
  network:
    egress: internet
  expireAfter: 1h
`;
}

/** The Docker runner image's entry point, its dockerd starter, and that starter as the image's template warm-up. */
async function dockerEntryPoint(): Promise<LayerEntry[]> {
  return [
    { path: "usr/local/bin/imp-docker-entrypoint", content: await readFile(join(repoRoot, "images/docker-runner/run.sh")), mode: 0o755 },
    { path: "usr/local/bin/imp-start-dockerd", content: await readFile(join(repoRoot, "images/docker-runner/start-dockerd.sh")), mode: 0o755 },
    { path: "etc/imp/", type: "directory" },
    { path: "etc/imp/template-warm-up", type: "symlink", linkname: "/usr/local/bin/imp-start-dockerd" },
  ];
}

/** The Docker runner image's layer for Gitea: gitea-runner as the runner program, the image's entry point. */
async function giteaDockerRunnerLayer(runnerBinary: string): Promise<Awaited<ReturnType<typeof buildLayer>>> {
  return buildLayer([
    { path: "usr/local/bin/gitea-runner", content: await readFile(runnerBinary), mode: 0o755 },
    { path: "runner/", type: "directory" },
    { path: "runner/run.sh", content: await readFile(join(repoRoot, "images/gitea-runner/run.sh")), mode: 0o755 },
    ...(await dockerEntryPoint()),
  ]);
}

/** The Docker runner image's own layer: this world's runner program and the image's entry point. */
async function dockerRunnerLayer(): Promise<Awaited<ReturnType<typeof buildLayer>>> {
  return buildLayer([
    { path: "runner/", type: "directory" },
    { path: "runner/imp-test-runner", content: await readFile(testRunnerPath), mode: 0o755 },
    { path: "runner/run.sh", content: '#!/bin/sh\nexec /runner/imp-test-runner "$@"\n', mode: 0o755 },
    ...(await dockerEntryPoint()),
  ]);
}

export interface TcpForwarder {
  readonly address: string;
  close(): Promise<void>;
}

/** A TCP forwarder on `host` (a free port) to `target`: the test registry as the VMs reach it. */
export async function forwardTcp(host: string, target: URL): Promise<TcpForwarder> {
  const sockets = new Set<Socket>();
  const server = createNetServer((client) => {
    const upstream = connect(Number(target.port), target.hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("close", () => sockets.delete(s)).on("error", () => undefined);
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve, reject) => server.once("error", reject).listen(0, host, () => resolve()));
  return {
    address: `${host}:${(server.address() as { port: number }).port}`,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

export interface GiteaPoolShape {
  readonly minIdle: number;
  readonly maxConcurrent: number;
  readonly labels: readonly string[];
  /** The Docker runner image with gitea-runner (worlds with `gitea: true, docker: true`): the runner runs as `runner`, dockerd beside it. */
  readonly docker?: boolean;
  /** Demand from Gitea's workflow_job webhooks (spec.webhook, secret `gitea-webhook`) with the listing as backstop; hook the repository with `hookGitea`. */
  readonly webhook?: boolean;
  /** Template gitea-runner-snapshot (gitea-docker-runner-snapshot with `docker`): class runner-small-snapshot (runner-docker-snapshot), `startFrom: Snapshot`. */
  readonly snapshot?: boolean;
}

function giteaPoolYaml(namespace: string, name: string, url: string, spec: GiteaPoolShape, repository: string, registryForVms: string | undefined): string {
  const docker = spec.docker === true;
  return `apiVersion: ${API_VERSION}
kind: ImpVMRunnerPool
metadata:
  name: ${name}
  namespace: ${namespace}
spec:
  templateName: ${docker ? "gitea-docker-runner" : "gitea-runner"}${spec.snapshot === true ? "-snapshot" : ""}
  gitea:
    url: ${url}
    credentialsSecretRef:
      name: gitea-token
    scope: repo
    repository: ${repository}
    labels: [${spec.labels.join(", ")}]
  minIdle: ${spec.minIdle}
  maxConcurrent: ${spec.maxConcurrent}
  runnerCommand: ["${docker ? "/usr/local/bin/imp-docker-entrypoint" : "/runner/run.sh"}"]
  runnerSetupDelivery: Stdin
${spec.webhook === true ? "  webhook:\n    enabled: true\n    secretRef:\n      name: gitea-webhook\n      key: secret\n" : ""}${docker && registryForVms !== undefined ? `  runnerEnv:\n    - { name: DOCKERD_INSECURE_REGISTRIES, value: "${registryForVms}" }\n` : ""}`;
}

export interface PoolShape {
  readonly minIdle: number;
  readonly maxConcurrent: number;
  readonly scaleUpStep?: number;
  /** Runner labels; default self-hosted, imp. */
  readonly labels?: readonly string[];
  /** How runners receive their setup; this world's runner reads it from stdin (default). */
  readonly setupDelivery?: "Environment" | "Stdin";
  /** Scale-set mode: the pool's scale set is named like the pool; no webhook. Default: webhook mode. */
  readonly scaleSet?: boolean;
  /** The Docker runner image (worlds with `docker: true`): template docker-runner, dockerd started by its entry point. */
  readonly docker?: boolean;
  /** Template runner-snapshot (docker-runner-snapshot with `docker`): class runner-small-snapshot (runner-docker-snapshot), `startFrom: Snapshot`. */
  readonly snapshot?: boolean;
}

export function poolYaml(namespace: string, name: string, githubUrl: string, spec: PoolShape, idleSeconds: number, registryForVms: string | undefined): string {
  const docker = spec.docker === true;
  return `apiVersion: ${API_VERSION}
kind: ImpVMRunnerPool
metadata:
  name: ${name}
  namespace: ${namespace}
spec:
  templateName: ${docker ? "docker-runner" : "runner"}${spec.snapshot === true ? "-snapshot" : ""}
  github:
    credentialsSecretRef:
      name: github-app
    apiURL: ${githubUrl}
    scope: repo
    repository: ${REPO.owner}/${REPO.repo}
    runnerGroup: Default
    labels: [${(spec.labels ?? RUNNER_LABELS).join(", ")}]
${spec.scaleSet === true ? `    scaleSet:\n      name: ${name}\n` : ""}  minIdle: ${spec.minIdle}
  maxConcurrent: ${spec.maxConcurrent}
  scaleUpStep: ${spec.scaleUpStep ?? 5}
${spec.scaleSet === true ? "" : "  webhook:\n    enabled: true\n    secretRef:\n      name: github-webhook\n      key: secret\n"}  runnerCommand: ["${docker ? "/usr/local/bin/imp-docker-entrypoint" : "/runner/run.sh"}"]
  runnerSetupDelivery: ${spec.setupDelivery ?? "Stdin"}
  runnerEnv:
    - { name: TEST_RUNNER_IDLE_SECONDS, value: "${idleSeconds}" }
${docker && registryForVms !== undefined ? `    - { name: DOCKERD_INSECURE_REGISTRIES, value: "${registryForVms}" }\n` : ""}`;
}
