import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import { ImpError, retryableError, terminalError, waitFor } from "../shared/index.ts";
import { findBinaries, type ControlPlaneBinaries } from "./binaries.ts";
import { apiServerArgs, controllerManagerArgs, etcdArgs, schedulerArgs } from "./component-args.ts";
import { renderKubeconfig } from "./kubeconfig.ts";
import { logTail } from "./log-tail.ts";
import { ManagedProcess } from "./managed-process.ts";
import { createPki, issueClientCertificate, type Pki } from "./pki.ts";
import { freePort } from "./ports.ts";
import { etcdHealthy, httpsGet, loadProbeTls } from "./readiness.ts";

export interface ControlPlaneOptions {
  /** Run kube-controller-manager (garbage collector, namespace controller). Default true. */
  readonly controllerManager?: boolean;
  /** State directory (PKI, etcd data, logs, kubeconfig). Default: a new temporary directory, removed on stop. */
  readonly dir?: string;
  /** Keep the state directory on stop (its *.log files are the components' own output). */
  readonly keepDir?: boolean;
  /** Processes outlive this Node.js process (for `imp dev cluster up`). Default false: they die with it. */
  readonly detached?: boolean;
  /** Per-component readiness timeout. */
  readonly readyTimeoutMs?: number;
  readonly signal?: AbortSignal;
  /** Binaries to run instead of the cached ones (tests use this to start components that fail). */
  readonly binaries?: ControlPlaneBinaries;
  /**
   * Serve real kubelets (test/e2e/real-node): the API server listens on `address` instead of
   * 127.0.0.1 (an address of a test range that the nodes' network namespaces reach), authorizes
   * nodes as nodes, the controller manager runs every default controller, and `kubeScheduler`
   * binds Pods.
   */
  readonly nodes?: { readonly address: string; readonly kubeScheduler: string };
}

export interface ControlPlaneState {
  readonly dir: string;
  readonly server: string;
  readonly kubeconfigPath: string;
  readonly pids: Readonly<Record<string, number | undefined>>;
}

/** How to reach the plane's etcd directly (TLS, client certificate required). Paths, not contents. */
export interface EtcdEndpoint {
  readonly url: string;
  readonly caCert: string;
  readonly clientCert: string;
  readonly clientKey: string;
}

/** A real etcd + kube-apiserver (+ kube-controller-manager) on loopback. */
export interface ControlPlane extends AsyncDisposable {
  readonly dir: string;
  readonly server: string;
  /** For tests that must act below the API server (e.g. compact history to force 410 Gone). */
  readonly etcd: EtcdEndpoint;
  readonly kubeconfigPath: string;
  readonly kubeConfig: KubeConfig;
  readonly binaries: ControlPlaneBinaries;
  /** Milliseconds from the call to "every component ready". */
  readonly startupMs: number;
  state(): ControlPlaneState;
  /** The plane's CA certificate (PEM file). */
  readonly caCert: string;
  /** A client certificate for `user` in `groups`, signed by the plane's CA (a kubelet's: system:node:<name> in system:nodes). */
  clientCertificate(name: string, user: string, groups: readonly string[]): Promise<{ cert: string; key: string }>;
  /** Creates a Node object (there is no kubelet); labels are merged onto the standard hostname label. */
  createNode(name: string, labels?: Readonly<Record<string, string>>): Promise<void>;
  /** Stops only the API server (etcd keeps the data), to break every watch. */
  stopApiServer(): Promise<void>;
  /** Starts the API server again on the same port against the same etcd, and waits until it is ready. */
  startApiServer(): Promise<void>;
  /** Stops every component (reverse order) and removes the state directory unless `keepDir`. Idempotent. */
  stop(): Promise<void>;
}

const DEFAULT_READY_TIMEOUT_MS = 60_000;
/** Start attempts when another process took a port between our probe and the component's bind. */
const PORT_CLASH_ATTEMPTS = 3;

/**
 * Starts a control plane and waits until it serves. On any failure everything started so far is
 * stopped again; a lost race for a free port is retried with new ports.
 */
export async function startControlPlane(options: ControlPlaneOptions = {}): Promise<ControlPlane> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(options);
    } catch (err) {
      if (attempt >= PORT_CLASH_ATTEMPTS || !(err instanceof ImpError && err.code === "PortClash")) throw err;
    }
  }
}

async function startOnce(options: ControlPlaneOptions): Promise<ControlPlane> {
  const started = Date.now();
  const binaries = options.binaries ?? (await findBinaries());
  const ownsDir = options.dir === undefined;
  const dir = options.dir ?? (await mkdtemp(join(tmpdir(), "imp-dev-")));
  await mkdir(join(dir, "certs"), { recursive: true });
  const processes: ManagedProcess[] = [];
  const readyTimeoutMs = options.readyTimeoutMs ?? DEFAULT_READY_TIMEOUT_MS;
  const detached = options.detached ?? false;
  const spawnComponent = (name: string, command: string, args: readonly string[]): ManagedProcess => {
    const proc = new ManagedProcess({ name, command, args, logFile: join(dir, `${name}.log`), detached });
    processes.push(proc);
    return proc;
  };
  const waitReady = (proc: ManagedProcess, ready: () => Promise<boolean>): Promise<void> =>
    waitComponentReady(proc, join(dir, `${proc.name}.log`), ready, readyTimeoutMs, options.signal);
  const stopAll = async (): Promise<void> => {
    for (const proc of [...processes].reverse()) await proc.stop();
  };

  try {
    const nodes = options.nodes;
    const pki = await createPki(join(dir, "certs"), nodes === undefined ? [] : [nodes.address]);
    const tls = await loadProbeTls(pki);
    // Each port is picked right before its component binds it, to keep the race window small.
    const [etcdClient, etcdPeer] = [await freePort(), await freePort()];
    const etcd = spawnComponent("etcd", binaries.etcd, etcdArgs(join(dir, "etcd"), { client: etcdClient, peer: etcdPeer }, pki));
    await waitReady(etcd, () => etcdHealthy(etcdClient, tls));

    const apiPort = await freePort();
    const server = `https://${nodes?.address ?? "127.0.0.1"}:${apiPort}`;
    const apiArgs = apiServerArgs({ port: apiPort, etcdClientPort: etcdClient, pki, certDir: join(dir, "certs"), ...(nodes === undefined ? {} : { nodes: { address: nodes.address } }) });
    const apiReady = async (): Promise<boolean> => (await httpsGet(`${server}/readyz`, tls))?.status === 200;
    let apiserver = spawnComponent("kube-apiserver", binaries.kubeApiserver, apiArgs);
    await waitReady(apiserver, apiReady);

    const kubeconfigPath = join(dir, "admin.kubeconfig");
    await writeFile(kubeconfigPath, await renderKubeconfig(server, pki), { mode: 0o600 });
    let controllerManager: ManagedProcess | undefined;
    if (options.controllerManager ?? true) {
      const kcmPort = await freePort();
      controllerManager = spawnComponent("kube-controller-manager", binaries.kubeControllerManager, controllerManagerArgs(kubeconfigPath, pki, kcmPort, nodes !== undefined));
      await waitReady(controllerManager, async () => (await httpsGet(`https://127.0.0.1:${kcmPort}/healthz`, "insecure"))?.status === 200);
    }
    if (nodes !== undefined) {
      const schedulerPort = await freePort();
      const scheduler = spawnComponent("kube-scheduler", nodes.kubeScheduler, schedulerArgs(kubeconfigPath, schedulerPort));
      await waitReady(scheduler, async () => (await httpsGet(`https://127.0.0.1:${schedulerPort}/healthz`, "insecure"))?.status === 200);
    }

    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromFile(kubeconfigPath);
    const startupMs = Date.now() - started;
    let stopped = false;

    const plane: ControlPlane = {
      dir,
      server,
      etcd: { url: `https://127.0.0.1:${etcdClient}`, caCert: pki.caCert, clientCert: pki.adminCert, clientKey: pki.adminKey },
      kubeconfigPath,
      kubeConfig,
      binaries,
      startupMs,
      caCert: pki.caCert,
      clientCertificate: (name, user, groups) => issueClientCertificate(join(dir, "certs"), pki, name, user, groups),
      state: () => ({
        dir,
        server,
        kubeconfigPath,
        pids: Object.fromEntries(processes.filter((p) => p.running).map((p) => [p.name, p.pid])),
      }),
      createNode: async (name, labels = {}) => {
        await kubeConfig.makeApiClient(CoreV1Api).createNode({
          body: { metadata: { name, labels: { "kubernetes.io/hostname": name, ...labels } } },
        });
      },
      stopApiServer: () => apiserver.stop(),
      startApiServer: async () => {
        if (apiserver.running) return;
        processes.splice(processes.indexOf(apiserver), 1);
        apiserver = spawnComponent("kube-apiserver", binaries.kubeApiserver, apiArgs);
        // Keep the controller manager last in the stop order.
        if (controllerManager !== undefined) {
          processes.splice(processes.indexOf(controllerManager), 1);
          processes.push(controllerManager);
        }
        await waitReady(apiserver, apiReady);
      },
      stop: async () => {
        if (stopped) return;
        stopped = true;
        await stopAll();
        if (ownsDir && !(options.keepDir ?? false)) await rm(dir, { recursive: true, force: true });
      },
      [Symbol.asyncDispose]: () => plane.stop(),
    };
    return plane;
  } catch (err) {
    await stopAll();
    if (ownsDir && !(options.keepDir ?? false)) await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

/**
 * Waits until `ready()` holds. A component that exits meanwhile ends the wait at once with a
 * terminal error carrying the tail of its log (the log itself may be removed with the state dir);
 * an exit caused by a port another process took is reported as `PortClash`, which the caller retries.
 */
async function waitComponentReady(
  proc: ManagedProcess,
  logFile: string,
  ready: () => Promise<boolean>,
  timeoutMs: number,
  signal: AbortSignal | undefined,
): Promise<void> {
  const exitedError = async (): Promise<ImpError> => {
    const code = await proc.exited();
    const tail = await logTail(logFile);
    const clash = /address already in use/i.test(tail);
    return (clash ? retryableError : terminalError)(clash ? "PortClash" : "ComponentExited", `Cannot start ${proc.name}: it exited with code ${String(code)}; last lines of its log:\n${tail}`, {
      context: { component: proc.name },
    });
  };
  // The wait ends as soon as the process exits, whatever the readiness probe is doing.
  const exitedSignal = new AbortController();
  void proc.exited().then(() => exitedSignal.abort(new Error(`${proc.name} exited`)));
  const waitSignal = signal === undefined ? exitedSignal.signal : AbortSignal.any([exitedSignal.signal, signal]);
  try {
    await waitFor(`start ${proc.name}`, async () => ((await ready()) ? true : undefined), { timeoutMs, intervalMs: 100, signal: waitSignal });
  } catch (err) {
    if (!proc.running) throw await exitedError();
    if (!(err instanceof ImpError && err.code === "Timeout")) throw err;
    throw new ImpError("retryable", "Timeout", `Cannot start ${proc.name}: not ready within ${timeoutMs} ms; last lines of its log:\n${await logTail(logFile)}`, { cause: err });
  }
}

export type { Pki };
