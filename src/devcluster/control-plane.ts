import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import { retryableError, waitFor } from "../shared/index.ts";
import { findBinaries, type ControlPlaneBinaries } from "./binaries.ts";
import { apiServerArgs, controllerManagerArgs, etcdArgs } from "./component-args.ts";
import { renderKubeconfig } from "./kubeconfig.ts";
import { ManagedProcess } from "./managed-process.ts";
import { createPki, type Pki } from "./pki.ts";
import { freePort } from "./ports.ts";
import { etcdHealthy, httpsGet, loadProbeTls, type ProbeTls } from "./readiness.ts";

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
}

export interface ControlPlaneState {
  readonly dir: string;
  readonly server: string;
  readonly kubeconfigPath: string;
  readonly pids: Readonly<Record<string, number | undefined>>;
}

/** A real etcd + kube-apiserver (+ kube-controller-manager) on loopback. */
export interface ControlPlane extends AsyncDisposable {
  readonly dir: string;
  readonly server: string;
  readonly kubeconfigPath: string;
  readonly kubeConfig: KubeConfig;
  readonly binaries: ControlPlaneBinaries;
  /** Milliseconds from the call to "every component ready". */
  readonly startupMs: number;
  state(): ControlPlaneState;
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

/** Starts a control plane and waits until it serves; on any failure everything started so far is stopped again. */
export async function startControlPlane(options: ControlPlaneOptions = {}): Promise<ControlPlane> {
  const started = Date.now();
  const binaries = await findBinaries();
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
  const stopAll = async (): Promise<void> => {
    for (const proc of [...processes].reverse()) await proc.stop();
  };

  try {
    const [pki, etcdClient, etcdPeer, apiPort, kcmPort] = await Promise.all([
      createPki(join(dir, "certs")),
      freePort(),
      freePort(),
      freePort(),
      freePort(),
    ]);
    const etcd = spawnComponent("etcd", binaries.etcd, etcdArgs(join(dir, "etcd"), { client: etcdClient, peer: etcdPeer }));
    await waitReady("etcd", etcd, () => etcdHealthy(etcdClient), readyTimeoutMs, options.signal);

    const server = `https://127.0.0.1:${apiPort}`;
    const tls = await loadProbeTls(pki);
    const apiArgs = apiServerArgs({ port: apiPort, etcdClientPort: etcdClient, pki, certDir: join(dir, "certs") });
    let apiserver = spawnComponent("kube-apiserver", binaries.kubeApiserver, apiArgs);
    await waitApiReady(apiserver, server, tls, readyTimeoutMs, options.signal);

    const kubeconfigPath = join(dir, "admin.kubeconfig");
    await writeFile(kubeconfigPath, await renderKubeconfig(server, pki), { mode: 0o600 });
    let controllerManager: ManagedProcess | undefined;
    if (options.controllerManager ?? true) {
      controllerManager = spawnComponent("kube-controller-manager", binaries.kubeControllerManager, [
        ...controllerManagerArgs(kubeconfigPath, pki),
        `--secure-port=${kcmPort}`,
      ]);
      const kcm = controllerManager;
      await waitReady(
        "kube-controller-manager",
        kcm,
        async () => (await httpsGet(`https://127.0.0.1:${kcmPort}/healthz`, "insecure"))?.status === 200,
        readyTimeoutMs,
        options.signal,
      );
    }

    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromFile(kubeconfigPath);
    const startupMs = Date.now() - started;
    let stopped = false;

    const plane: ControlPlane = {
      dir,
      server,
      kubeconfigPath,
      kubeConfig,
      binaries,
      startupMs,
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
        await waitApiReady(apiserver, server, tls, readyTimeoutMs, options.signal);
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

async function waitReady(
  what: string,
  proc: ManagedProcess,
  ready: () => Promise<boolean>,
  timeoutMs: number,
  signal: AbortSignal | undefined,
): Promise<void> {
  await waitFor(
    `start ${what}`,
    async () => {
      if (!proc.running) {
        throw retryableError("ComponentExited", `Cannot start ${what}: it exited with code ${await proc.exited()}; see ${what}.log`);
      }
      return (await ready()) ? true : undefined;
    },
    { timeoutMs, intervalMs: 100, ...(signal === undefined ? {} : { signal }) },
  ).catch(async (err: unknown) => {
    if (!proc.running) throw retryableError("ComponentExited", `Cannot start ${what}: it exited with code ${await proc.exited()}`, { cause: err });
    throw err;
  });
}

function waitApiReady(proc: ManagedProcess, server: string, tls: ProbeTls, timeoutMs: number, signal: AbortSignal | undefined): Promise<void> {
  return waitReady("kube-apiserver", proc, async () => (await httpsGet(`${server}/readyz`, tls))?.status === 200, timeoutMs, signal);
}

export type { Pki };
