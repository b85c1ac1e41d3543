/**
 * A real Kubernetes node on this machine: Debian's containerd and runc, the kubelet and kube-proxy
 * built from k8s.io/kubernetes (scripts/setup.d/26-kube-node.sh), all inside one network namespace
 * (a simulated node's, test/e2e/runner-path/sim-nodes.ts) so the kubelet's node IP, its hostNetwork
 * Pods, kube-proxy's rules and the Pods' bridge stay off the host's own network.
 *
 * What the kubelet changes on the host is put back by `stop()` and checked by `hostChanges()`:
 * sysctls it sets (vm.overcommit_memory, kernel.panic, kernel.panic_on_oops), the mounts of Pod
 * volumes under its root directory, the cgroups of its Pods (under a cgroup root of its own) and the
 * files it and containerd keep. containerd gets its own root, state, socket, runc state and Pod
 * network namespaces under the node's directory, the kubelet its root and certificate directory;
 * the paths they use whatever they are told (HOST_PATHS) are removed if the node created them.
 */
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { KUBE_VERSION, type ControlPlane } from "../../../src/devcluster/index.ts";
import { logTail } from "../../../src/devcluster/log-tail.ts";
import { ManagedProcess } from "../../../src/devcluster/managed-process.ts";
import { waitFor } from "../../../src/shared/index.ts";
import { cgroupHierarchies, createInEveryHierarchy, killUntilGone, processesInTree, removeCgroupTrees } from "../../harness/cgroups.ts";

const execFileAsync = promisify(execFile);
const repoRoot = resolve(import.meta.dirname, "../../..");
const cacheDir = process.env.IMP_CACHE ?? join(repoRoot, ".cache");
export const NODE_BIN = join(cacheDir, "bin", `kube-node-${KUBE_VERSION}`);
export const PAUSE_IMAGE = "registry.k8s.io/pause:3.10";
const SYSCTLS = ["vm.overcommit_memory", "kernel.panic", "kernel.panic_on_oops"] as const;
const SYSCTL_FILE = "/run/imp-kube-node.sysctls.json";
/**
 * Host paths the kubelet, containerd 1.6 and the CNI plugins use whatever their configuration says
 * (the device-plugin socket, the CNI result cache, the container log links, the shims' sockets). A
 * path that did not exist before the node started is removed when it stops.
 */
const HOST_PATHS = ["/var/lib/kubelet", "/usr/libexec/kubernetes", "/var/lib/cni", "/var/log/containers", "/var/log/pods", "/run/containerd", "/etc/cni"] as const;
/** Pods on the node's bridge: a test range, inside the node's namespace only. */
const POD_CIDR = "198.18.251.0/24";
const CLUSTER_DNS = "10.0.0.10";

/** Why this machine cannot run a real node, or undefined when it can. */
export async function kubeNodeUnavailable(): Promise<string | undefined> {
  if (process.getuid?.() !== 0) return "needs root (containerd, the kubelet, network namespaces)";
  for (const bin of ["kubelet", "kube-proxy", "kube-scheduler", "pause"]) {
    if (!existsSync(join(NODE_BIN, bin))) return `${join(NODE_BIN, bin)} is missing (scripts/setup.d/26-kube-node.sh builds it)`;
  }
  for (const tool of ["containerd", "runc", "ctr", "iptables"]) {
    try {
      await execFileAsync("sh", ["-c", `command -v ${tool}`]);
    } catch {
      return `${tool} is not installed (scripts/setup.d/26-kube-node.sh installs it)`;
    }
  }
  if (!existsSync("/usr/lib/cni/bridge")) return "the CNI plugins are not installed (containernetworking-plugins)";
  return undefined;
}

export interface KubeNodeOptions {
  readonly name: string;
  /** Everything of the node lives under here (containerd's root, the kubelet's root, logs). */
  readonly dir: string;
  readonly netns: string;
  /** The node's address (its uplink's, inside `netns`). */
  readonly nodeIp: string;
  readonly plane: ControlPlane;
  readonly labels?: Readonly<Record<string, string>>;
  /**
   * Host paths this node sees as directories of its own (path → its own directory): a second node
   * on one machine gets its own agent state directory, as a second machine would, though the
   * chart's DaemonSet names one host path for every node. The node's processes then share a mount
   * namespace of their own, in which these are bound.
   */
  readonly ownDirs?: Readonly<Record<string, string>>;
}

export class KubeNode {
  readonly name: string;
  readonly dir: string;
  readonly netns: string;
  readonly socket: string;
  readonly #processes: ManagedProcess[] = [];
  /** Holds the node's own mount namespace (ownDirs) open while its processes come and go. */
  #mountHolder: ManagedProcess | undefined;
  readonly #sysctls = new Map<string, string>();
  /** HOST_PATHS that did not exist before this node started. */
  readonly #newHostPaths: string[] = [];
  readonly #options: KubeNodeOptions;
  /** Milliseconds from containerd's start to the Node Ready. */
  readyMs = 0;
  /** The cgroup (in every hierarchy) under which the kubelet puts its Pods. */
  readonly cgroupRoot: string;

  private constructor(options: KubeNodeOptions) {
    this.#options = options;
    this.name = options.name;
    this.dir = options.dir;
    this.netns = options.netns;
    this.socket = join(options.dir, "containerd", "containerd.sock");
    // Per run (the namespace is unique): a run killed before its stop leaves its Pods' cgroups, which
    // must not be taken for this run's.
    this.cgroupRoot = `imp-kube-${options.netns}`;
  }

  static async start(options: KubeNodeOptions): Promise<KubeNode> {
    const node = new KubeNode(options);
    try {
      await node.#start();
      return node;
    } catch (err) {
      await node.stop();
      throw err;
    }
  }

  async #start(): Promise<void> {
    const { dir, plane, name } = this.#options;
    // The host's values, kept where a run killed before its stop leaves them for the next run to restore.
    const saved = await readFile(SYSCTL_FILE, "utf8").then((t) => JSON.parse(t) as Record<string, string>, () => undefined);
    for (const key of SYSCTLS) this.#sysctls.set(key, saved?.[key] ?? (await execFileAsync("sysctl", ["-n", key])).stdout.trim());
    if (saved === undefined) await writeFile(SYSCTL_FILE, JSON.stringify(Object.fromEntries(this.#sysctls)));
    for (const path of HOST_PATHS) if (!existsSync(path)) this.#newHostPaths.push(path);
    for (const sub of ["containerd/root", "containerd/state", "cni/net.d", "cni/state", "kubelet", "pods-logs", "volume-plugins"]) await mkdir(join(dir, sub), { recursive: true });
    await writeFile(join(dir, "containerd", "config.toml"), this.#containerdConfig());
    await writeFile(join(dir, "cni", "net.d", "10-pods.conflist"), JSON.stringify(cniConfig(join(dir, "cni", "ipam")), null, 2));
    // The kubelet wants its cgroup root to exist in every hierarchy.
    await createInEveryHierarchy(this.cgroupRoot);
    if (this.#options.ownDirs !== undefined) await this.#startMountNamespace(this.#options.ownDirs);
    const started = Date.now();
    const containerd = this.#spawn("containerd", "containerd", ["--config", join(dir, "containerd", "config.toml")]);
    await waitFor("containerd serving", async () => {
      if (!containerd.running) throw new Error(`containerd exited: ${await logTail(join(dir, "containerd.log"), 30)}`);
      return (await this.ctr(["version"]).then(() => true, () => false)) ? true : undefined;
    }, { timeoutMs: 60_000, intervalMs: 200 });
    await this.importImage(await pauseImageTar(dir));

    const { cert, key } = await plane.clientCertificate(`kubelet-${name}`, `system:node:${name}`, ["system:nodes"]);
    const kubeconfig = join(dir, "kubelet.kubeconfig");
    await writeFile(kubeconfig, kubeconfigOf(plane.server, plane.caCert, cert, key), { mode: 0o600 });
    await writeFile(join(dir, "kubelet.yaml"), this.#kubeletConfig());
    this.#spawn("kubelet", join(NODE_BIN, "kubelet"), [
      `--config=${join(dir, "kubelet.yaml")}`,
      `--kubeconfig=${kubeconfig}`,
      `--root-dir=${join(dir, "kubelet")}`,
      `--cert-dir=${join(dir, "kubelet-pki")}`,
      `--node-ip=${this.#options.nodeIp}`,
      `--hostname-override=${name}`,
      ...(this.#options.labels === undefined ? [] : [`--node-labels=${Object.entries(this.#options.labels).map(([k, v]) => `${k}=${v}`).join(",")}`]),
      "--v=1",
    ]);
    await writeFile(join(dir, "kube-proxy.yaml"), this.#proxyConfig(plane.kubeconfigPath));
    this.#spawn("kube-proxy", join(NODE_BIN, "kube-proxy"), [`--config=${join(dir, "kube-proxy.yaml")}`, "--v=1"]);
    await waitFor(`node ${name} Ready`, async () => {
      for (const p of this.#processes) if (!p.running) throw new Error(`${p.name} exited: ${await logTail(join(dir, `${p.name}.log`), 30)}`);
      const out = await execFileAsync(plane.binaries.kubectl, ["--kubeconfig", plane.kubeconfigPath, "get", "node", name, "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}"]).then((r) => r.stdout, () => "");
      return out === "True" ? true : undefined;
    }, { timeoutMs: 180_000, intervalMs: 500 });
    this.readyMs = Date.now() - started;
  }

  /**
   * A mount namespace in which each of `ownDirs` is bound over its host path. The kubelet, containerd
   * and kube-proxy all join it: containerd must see the volumes the kubelet mounts for its Pods, and
   * the mounts of a host may be private, so nothing would propagate between two namespaces.
   */
  async #startMountNamespace(ownDirs: Readonly<Record<string, string>>): Promise<void> {
    const binds = Object.entries(ownDirs);
    for (const [, own] of binds) await mkdir(own, { recursive: true });
    const holder = new ManagedProcess({
      name: "mount-namespace",
      command: "unshare",
      // Slave: the host's mounts still reach the node, its binds never reach the host. /run/netns (a
      // Bidirectional volume of the agent) must be shared for containerd: a peer group of its own here.
      args: ["--mount", "--propagation", "slave", "sh", "-c", 'if mountpoint -q /run/netns; then mount --make-shared /run/netns || exit 1; fi; while [ $# -gt 0 ]; do mount --bind "$1" "$2" || exit 1; shift 2; done; exec sleep infinity', "sh", ...binds.flatMap(([path, own]) => [own, path])],
      logFile: join(this.dir, "mount-namespace.log"),
    });
    this.#mountHolder = holder;
    await waitFor("the node's own mount namespace", async () => {
      if (!holder.running) throw new Error(`the node's mount namespace could not be made: ${await logTail(join(this.dir, "mount-namespace.log"), 10)}`);
      const mounted = (await readFile(`/proc/${holder.pid ?? 0}/mountinfo`, "utf8").catch(() => "")).split("\n").map((l) => l.split(" ")[4]);
      return binds.every(([path]) => mounted.includes(path)) ? true : undefined;
    }, { timeoutMs: 10_000, intervalMs: 50 });
  }

  #spawn(name: string, command: string, args: readonly string[]): ManagedProcess {
    // nsenter, not `ip netns exec`: that also remounts /sys for the namespace, hiding the cgroup
    // mounts the kubelet and runc need.
    const mountNs = this.#mountHolder?.pid === undefined ? [] : [`--mount=/proc/${this.#mountHolder.pid}/ns/mnt`];
    const proc = new ManagedProcess({ name, command: "nsenter", args: [`--net=/run/netns/${this.netns}`, ...mountNs, "--", command, ...args], logFile: join(this.dir, `${name}.log`) });
    this.#processes.push(proc);
    return proc;
  }

  /** `ctr` against this node's containerd, in the namespace the kubelet uses. */
  async ctr(args: readonly string[], timeoutMs = 120_000): Promise<string> {
    const { stdout } = await execFileAsync("ctr", ["--address", this.socket, "--namespace", "k8s.io", ...args], { timeout: timeoutMs, maxBuffer: 16 << 20 });
    return stdout;
  }

  /** Imports an OCI image archive (a tar of an OCI layout whose index names the image). */
  async importImage(tar: string): Promise<void> {
    await this.ctr(["images", "import", "--no-unpack=false", tar], 600_000);
  }

  /** The log of one of the node's processes (containerd, kubelet, kube-proxy). */
  async log(name: "containerd" | "kubelet" | "kube-proxy"): Promise<string> {
    return readFile(join(this.dir, `${name}.log`), "utf8").catch(() => "");
  }

  /**
   * Stops the kubelet and kube-proxy, then every container left (the kubelet does not stop Pods when
   * it stops), then containerd; unmounts what Pods mounted under the node's directory, removes the
   * Pods' cgroups, and puts the sysctls back. Idempotent.
   */
  async stop(): Promise<void> {
    const [containerd, ...rest] = this.#processes.splice(0);
    for (const p of rest.reverse()) await p.stop();
    if (containerd !== undefined) {
      if (containerd.running) {
        const tasks = (await this.ctr(["tasks", "list", "-q"]).catch(() => "")).split("\n").filter((t) => t !== "");
        for (const t of tasks) await this.ctr(["tasks", "kill", "--signal", "SIGKILL", t]).catch(() => undefined);
        for (const t of tasks) await this.ctr(["tasks", "delete", "--force", t]).catch(() => undefined);
        for (const c of (await this.ctr(["containers", "list", "-q"]).catch(() => "")).split("\n").filter((c) => c !== "")) await this.ctr(["containers", "delete", c]).catch(() => undefined);
      }
      await containerd.stop();
    }
    // Its mount namespace goes with the last process in it: the mounts of its Pods with it.
    await this.#mountHolder?.stop();
    await unmountUnder(this.dir);
    for (const path of this.#newHostPaths) await rm(path, { recursive: true, force: true }).catch(() => undefined);
    await removeCgroupTrees(this.cgroupRoot);
    for (const [key, value] of this.#sysctls) await execFileAsync("sysctl", ["-q", "-w", `${key}=${value}`]).catch(() => undefined);
    if (this.#sysctls.size > 0) await rm(SYSCTL_FILE, { force: true });
    await rm(this.dir, { recursive: true, force: true }).catch(() => undefined);
  }

  /**
   * The machine dies: SIGKILL of its kubelet, kube-proxy and containerd, of the containerd shims and
   * of every process in its Pods' cgroups, with no chance to clean up. Its VMs are not in those
   * cgroups (the agent moves them out); the caller kills them. Returns how many processes it killed.
   * `stop()` removes what is left.
   */
  async vanish(): Promise<number> {
    const killed = await killUntilGone(async () => {
      const pids = new Set<number>();
      for (const p of this.#processes) if (p.running && p.pid !== undefined) pids.add(p.pid);
      for (const line of (await execFileAsync("pgrep", ["-f", `containerd-shim.*${this.#options.dir}`]).then((r) => r.stdout, () => "")).split("\n")) if (line !== "") pids.add(Number(line));
      for (const pid of await processesInTree(this.cgroupRoot)) pids.add(pid);
      return pids;
    }, 5, 200);
    for (const p of this.#processes) await p.exited();
    return killed;
  }

  /** What of the node is still on the host: changed sysctls, mounts under its directory, Pod cgroups, containerd shims. */
  async hostChanges(): Promise<string[]> {
    const out: string[] = [];
    for (const [key, value] of this.#sysctls) {
      const now = (await execFileAsync("sysctl", ["-n", key])).stdout.trim();
      if (now !== value) out.push(`sysctl ${key} is ${now}, was ${value}`);
    }
    const mounts = (await readFile("/proc/self/mountinfo", "utf8")).split("\n").map((l) => l.split(" ")[4] ?? "").filter((m) => m.startsWith(this.dir));
    out.push(...mounts.map((m) => `mount ${m}`));
    for (const hierarchy of await cgroupHierarchies()) if (existsSync(join(hierarchy, this.cgroupRoot))) out.push(`cgroup ${join(hierarchy, this.cgroupRoot)}`);
    out.push(...this.#newHostPaths.filter((path) => existsSync(path)).map((path) => `path ${path} (created by the node)`));
    const shims = (await execFileAsync("pgrep", ["-f", `containerd-shim.*${this.#options.dir}`]).then((r) => r.stdout, () => "")).split("\n").filter((l) => l !== "");
    out.push(...shims.map((pid) => `containerd shim pid ${pid}`));
    return out;
  }

  #containerdConfig(): string {
    const d = join(this.dir, "containerd");
    return `version = 2
root = "${d}/root"
state = "${d}/state"
[grpc]
  address = "${this.socket}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "${PAUSE_IMAGE}"
  # Root here lacks CAP_SYS_RESOURCE: runc cannot set a negative oom_score_adj.
  restrict_oom_score_adj = true
  # Pods' network namespace files under the state directory, not /run/netns.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        # runc's state under the node's directory, not /run/containerd/runc.
        Root = "${d}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "${join(this.dir, "cni", "net.d")}"
`;
  }

  #kubeletConfig(): string {
    return `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine has cgroup v1 (and no systemd): the kubelet refuses v1 unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://${this.socket}
# Its Pods' cgroups under a root of its own: never the host's, nor another test kubelet's, kubepods.
cgroupRoot: /${this.cgroupRoot}
authentication:
  anonymous: { enabled: false }
  webhook: { enabled: true }
  x509: { clientCAFile: ${this.#options.plane.caCert} }
authorization: { mode: Webhook }
clusterDNS: [${CLUSTER_DNS}]
clusterDomain: cluster.local
podCIDR: ${POD_CIDR}
volumePluginDir: ${join(this.dir, "volume-plugins")}
podLogsDir: ${join(this.dir, "pods-logs")}
# The tests' disk is a shared /tmp: never evict for its fill level.
evictionHard: { memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%" }
imageGCHighThresholdPercent: 100
failSwapOn: false
makeIPTablesUtilChains: false
resolvConf: /etc/resolv.conf
serializeImagePulls: false
`;
  }

  #proxyConfig(kubeconfig: string): string {
    return `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: { kubeconfig: ${kubeconfig} }
mode: iptables
hostnameOverride: ${this.name}
clusterCIDR: ${POD_CIDR}
# Inside the node's own network namespace: these ports are its, not the host's.
# Its own namespace's conntrack table: leave the host's sysctls alone.
conntrack: { maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s }
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
`;
  }
}

function cniConfig(ipamDir: string): object {
  return {
    cniVersion: "0.4.0",
    name: "imp-test-pods",
    plugins: [
      { type: "bridge", bridge: "cni0", isGateway: true, ipMasq: true, ipam: { type: "host-local", dataDir: ipamDir, ranges: [[{ subnet: POD_CIDR }]], routes: [{ dst: "0.0.0.0/0" }] } },
      { type: "portmap", capabilities: { portMappings: true } },
    ],
  };
}

function kubeconfigOf(server: string, caCert: string, cert: string, key: string): string {
  return `apiVersion: v1
kind: Config
clusters: [{ name: imp, cluster: { server: ${server}, certificate-authority: ${caCert} } }]
users: [{ name: node, user: { client-certificate: ${cert}, client-key: ${key} } }]
contexts: [{ name: imp, context: { cluster: imp, user: node } }]
current-context: imp
`;
}

/** The pause image as an OCI archive: Kubernetes' pause program (static), one layer. */
async function pauseImageTar(dir: string): Promise<string> {
  const { buildImage, buildLayer, writeOciLayout } = await import("../../harness/oci-image.ts");
  const layer = await buildLayer([{ path: "pause", content: await readFile(join(NODE_BIN, "pause")), mode: 0o755 }]);
  const image = buildImage([layer], { cmd: ["/pause"] });
  const layout = join(dir, "pause-layout");
  await writeOciLayout(layout, image, PAUSE_IMAGE);
  // containerd names an imported image by this annotation (the OCI ref name alone is only a tag to it).
  const index = JSON.parse(await readFile(join(layout, "index.json"), "utf8")) as { manifests: Array<{ annotations: Record<string, string> }> };
  for (const m of index.manifests) m.annotations["io.containerd.image.name"] = PAUSE_IMAGE;
  await writeFile(join(layout, "index.json"), JSON.stringify(index));
  const tar = join(dir, "pause.tar");
  await execFileAsync("tar", ["-C", layout, "-cf", tar, "."]);
  return tar;
}

async function unmountUnder(dir: string): Promise<void> {
  for (let round = 0; round < 5; round++) {
    const mounts = (await readFile("/proc/self/mountinfo", "utf8")).split("\n").map((l) => l.split(" ")[4] ?? "").filter((m) => m.startsWith(dir)).sort((a, b) => b.length - a.length);
    if (mounts.length === 0) return;
    for (const m of mounts) await execFileAsync("umount", ["-l", m]).catch(() => undefined);
  }
}
