import { dirname, join } from "node:path";
import type { Pki } from "./pki.ts";

/**
 * Command lines of the control-plane components, as pure functions so the flags can be read and
 * tested in one place. Everything listens on 127.0.0.1 only, except an API server that serves real
 * kubelets (`nodes`): it listens on the one address given, which the caller keeps inside a test range.
 */

export interface EtcdPorts {
  readonly client: number;
  readonly peer: number;
}

/** etcd serves clients over TLS with the control plane's CA and requires a client certificate (the API server's). */
export function etcdArgs(dataDir: string, ports: EtcdPorts, pki: Pki): string[] {
  const client = `https://127.0.0.1:${ports.client}`;
  const peer = `http://127.0.0.1:${ports.peer}`;
  return [
    "--name=imp-dev",
    `--data-dir=${dataDir}`,
    `--listen-client-urls=${client}`,
    `--advertise-client-urls=${client}`,
    `--listen-peer-urls=${peer}`,
    `--initial-advertise-peer-urls=${peer}`,
    `--initial-cluster=imp-dev=${peer}`,
    "--initial-cluster-state=new",
    `--cert-file=${pki.servingCert}`,
    `--key-file=${pki.servingKey}`,
    `--trusted-ca-file=${pki.caCert}`,
    "--client-cert-auth",
    // A dev/test store: losing it on power loss is fine, and fsync dominates start-up and test time.
    "--unsafe-no-fsync",
    "--log-level=warn",
  ];
}

export interface ApiServerArgsInput {
  readonly port: number;
  readonly etcdClientPort: number;
  readonly pki: Pki;
  readonly certDir: string;
  /** Serve real kubelets: listen on this address, authorize nodes as nodes (Node + NodeRestriction). */
  readonly nodes?: { readonly address: string };
}

export function apiServerArgs(input: ApiServerArgsInput): string[] {
  const { pki } = input;
  const address = input.nodes?.address ?? "127.0.0.1";
  return [
    `--bind-address=${address}`,
    `--advertise-address=${address}`,
    `--secure-port=${input.port}`,
    `--etcd-servers=https://127.0.0.1:${input.etcdClientPort}`,
    `--etcd-cafile=${pki.caCert}`,
    `--etcd-certfile=${pki.adminCert}`,
    `--etcd-keyfile=${pki.adminKey}`,
    `--cert-dir=${input.certDir}`,
    `--tls-cert-file=${pki.servingCert}`,
    `--tls-private-key-file=${pki.servingKey}`,
    `--client-ca-file=${pki.caCert}`,
    ...(input.nodes === undefined
      ? ["--authorization-mode=RBAC"]
      : [
          // A kubelet may touch only its own Node and the Pods bound to it, as in any real cluster.
          "--authorization-mode=Node,RBAC",
          "--enable-admission-plugins=NodeRestriction",
          // logs/exec reach the kubelet by its InternalIP: the node's name resolves nowhere.
          "--kubelet-preferred-address-types=InternalIP",
          `--kubelet-client-certificate=${pki.adminCert}`,
          `--kubelet-client-key=${pki.adminKey}`,
        ]),
    "--service-cluster-ip-range=10.0.0.0/24",
    `--service-account-key-file=${pki.serviceAccountPub}`,
    `--service-account-signing-key-file=${pki.serviceAccountKey}`,
    "--service-account-issuer=https://kubernetes.default.svc",
    "--allow-privileged=true",
    "--profiling=false",
    "--v=1",
  ];
}

export function controllerManagerArgs(kubeconfigPath: string, pki: Pki, port: number, nodes = false): string[] {
  return [
    `--kubeconfig=${kubeconfigPath}`,
    `--authentication-kubeconfig=${kubeconfigPath}`,
    `--authorization-kubeconfig=${kubeconfigPath}`,
    // Without nodes, only what Imp relies on: ownerReference garbage collection and namespace
    // deletion. With nodes, every default controller: DaemonSets, Deployments, node lifecycle
    // (else the not-ready taint stays and Pods stay Pending), EndpointSlices, the root CA ConfigMap…
    nodes ? "--controllers=*" : "--controllers=garbagecollector,namespace,serviceaccount",
    // Its volume controllers create this directory: the plane's own, not the host's /usr/libexec/kubernetes.
    ...(nodes ? [`--flex-volume-plugin-dir=${join(dirname(kubeconfigPath), "flexvolume")}`] : []),
    "--leader-elect=false",
    "--bind-address=127.0.0.1",
    // Serves /healthz (always allowed without authorization) for the readiness probe.
    `--secure-port=${port}`,
    `--service-account-private-key-file=${pki.serviceAccountKey}`,
    `--root-ca-file=${pki.caCert}`,
    "--v=1",
  ];
}

/** kube-scheduler: Pods of a real node need binding. Health on 127.0.0.1:`port`. */
export function schedulerArgs(kubeconfigPath: string, port: number): string[] {
  return [
    `--kubeconfig=${kubeconfigPath}`,
    `--authentication-kubeconfig=${kubeconfigPath}`,
    `--authorization-kubeconfig=${kubeconfigPath}`,
    "--leader-elect=false",
    "--bind-address=127.0.0.1",
    `--secure-port=${port}`,
    "--v=1",
  ];
}
