/**
 * The Helm chart (deploy/helm/imp) with the real Helm v4 and a real API server: `helm lint --strict`;
 * the values schema refuses what the operator or agent would refuse later; the rendered agent config
 * is one `imp agent` accepts and the operator's flags are ones `imp operator` knows; the RBAC it
 * renders is deploy/rbac (one source) in the release's namespace; and a real install, upgrade and
 * uninstall on a control plane: everything created, the CRDs and the objects of their kinds kept
 * on uninstall, nothing else left. (No kubelet here: the Pods stay Pending; the real-node test is
 * still to come, docs/install.md.)
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { readdir, readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { parseAllDocuments } from "yaml";
import { parseAgentConfig } from "../../../src/agent/index.ts";
import { startControlPlane, type ControlPlane } from "../../../src/devcluster/index.ts";

const exec = promisify(execFile);
const root = resolve(import.meta.dirname, "../../..");
const chart = join(root, "deploy/helm/imp");
const helmBin = join(process.env.IMP_CACHE ?? join(root, ".cache"), "bin", "helm");
const unavailable = existsSync(helmBin) ? undefined : `no Helm at ${helmBin}: run scripts/setup.d/64-helm.sh`;
if (unavailable !== undefined) process.stdout.write(`# helm chart: cannot run: ${unavailable}\n`);

interface Obj {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; annotations?: Record<string, string>; labels?: Record<string, string> };
  [k: string]: unknown;
}

async function helm(args: readonly string[], env: NodeJS.ProcessEnv = {}): Promise<string> {
  try {
    const { stdout } = await exec(helmBin, args, { timeout: 180_000, maxBuffer: 32 << 20, env: { ...process.env, HOME: "/tmp", ...env } });
    return stdout;
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`helm ${args.join(" ")} failed: ${e.stderr ?? e.message}`, { cause: err });
  }
}

const docs = (text: string): Obj[] => parseAllDocuments(text).map((d) => d.toJS() as Obj | null).filter((o): o is Obj => o !== null);

async function render(namespace: string, ...set: string[]): Promise<Obj[]> {
  return docs(await helm(["template", "imp", chart, "--namespace", namespace, ...set.flatMap((s) => ["--set", s])]));
}

describe("the Helm chart", { skip: unavailable, timeout: 600_000 }, () => {
  it("passes helm lint --strict", async () => {
    const out = await helm(["lint", "--strict", chart]);
    assert.match(out, /1 chart\(s\) linted, 0 chart\(s\) failed/);
  });

  it("refuses values the operator or agent would refuse later, naming the key", async () => {
    const refused = async (set: string): Promise<string> => {
      const err = await render("imp", set).then(() => undefined, (e: unknown) => (e as Error).message);
      assert.ok(err !== undefined, `--set ${set} was accepted`);
      return err;
    };
    assert.match(await refused("agent.config.acel=kvm"), /additional properties 'acel' not allowed/);
    assert.match(await refused("agent.config.vmm=docker"), /\/agent\/config\/vmm/);
    assert.match(await refused("operator.logLevel=verbose"), /\/operator\/logLevel/);
    assert.match(await refused("image.digest=latest"), /\/image\/digest/);
    assert.match(await refused("agent.stateDir=relative/path"), /\/agent\/stateDir/);
    assert.match(await refused("agent.config.guestAgent=null"), /guestAgent/);
  });

  it("renders an agent config `imp agent` accepts and operator flags `imp operator` knows", async () => {
    const objs = await render("ci-system", "operator.webhook.enabled=true", "operator.webhook.secretName=hook", "operator.watchNamespace=runners");
    const cm = objs.find((o) => o.kind === "ConfigMap" && o.metadata.name === "imp-agent") as Obj & { data: Record<string, string> };
    const config = parseAgentConfig(docs(cm.data["agent.yaml"] ?? "")[0], { NODE_NAME: "node-1" }, "the chart's agent config");
    assert.equal(config.nodeName, "node-1");
    assert.equal(config.leaseNamespace, "ci-system", "the agents' Leases live in the release namespace");
    assert.equal(config.stateDir, "/var/lib/imp");
    assert.equal(config.healthHost, "0.0.0.0", "probes reach it on the node's address");
    const ds = objs.find((o) => o.kind === "DaemonSet") as Obj & { spec: { template: { spec: { hostPID: boolean; hostNetwork: boolean; containers: Array<{ args: string[] }> } } } };
    assert.equal(ds.spec.template.spec.hostPID, true, "supervisors outlive the agent Pod only outside its PID namespace");
    assert.equal(ds.spec.template.spec.hostNetwork, true);
    const deploy = objs.find((o) => o.kind === "Deployment") as Obj & { spec: { template: { spec: { containers: Array<{ args: string[] }> } } } };
    const args = deploy.spec.template.spec.containers[0]?.args ?? [];
    assert.deepEqual(args.filter((a) => a.startsWith("--lease-namespace") || a.startsWith("--agent-lease-namespace")), ["--lease-namespace=ci-system", "--agent-lease-namespace=ci-system"]);
    const { stdout: help } = await exec(process.execPath, [join(root, "src/cli/main.ts"), "operator", "--help"], { timeout: 60_000 });
    for (const flag of args.filter((a) => a.startsWith("--")).map((a) => a.split("=")[0] ?? "")) assert.ok(help.includes(`${flag} `), `imp operator has no flag ${flag}`);
    assert.ok(objs.some((o) => o.kind === "Service" && o.metadata.name === "imp-operator-webhook"));
    assert.ok(!objs.some((o) => o.kind === "ServiceMonitor"), "no ServiceMonitor unless asked (it needs the Prometheus Operator's CRDs)");
    assert.ok((await render("imp", "metrics.serviceMonitor.enabled=true")).some((o) => o.kind === "ServiceMonitor"));
  });

  it("renders a pre-delete hook whose Job runs `imp decommission` with flags it knows, and none when uninstall.endVMs is false", async () => {
    const objs = await render("ci-system", "uninstall.keepNodeState=true", "operator.watchNamespace=runners");
    const hooked = objs.filter((o) => o.metadata.annotations?.["helm.sh/hook"] === "pre-delete");
    assert.deepEqual(hooked.map((o) => `${o.kind}/${o.metadata.name}`).sort(), ["ClusterRole/imp-decommission", "ClusterRoleBinding/imp-decommission", "Job/imp-decommission", "Role/imp-decommission-leases", "RoleBinding/imp-decommission-leases", "ServiceAccount/imp-decommission"]);
    for (const o of hooked) assert.match(o.metadata.annotations?.["helm.sh/hook-delete-policy"] ?? "", /hook-succeeded/, `${o.kind} goes once the hook succeeded`);
    for (const o of hooked.filter((h) => h.kind !== "Job")) assert.ok(Number(o.metadata.annotations?.["helm.sh/hook-weight"]) < 0, `${o.kind} exists before the Job starts`);
    const job = hooked.find((o) => o.kind === "Job") as Obj & { spec: { template: { spec: { containers: Array<{ args: string[] }> } } } };
    const args = job.spec.template.spec.containers[0]?.args ?? [];
    assert.deepEqual(args, ["decommission", "--agent-lease-namespace=ci-system", "--namespace=runners", "--keep-node-state", "--vm-timeout=180", "--node-timeout=60"]);
    const { stdout: help } = await exec(process.execPath, [join(root, "src/cli/main.ts"), "decommission", "--help"], { timeout: 60_000 });
    for (const flag of args.filter((a) => a.startsWith("--")).map((a) => a.split("=")[0] ?? "")) assert.ok(help.includes(`${flag} `), `imp decommission has no flag ${flag}`);
    assert.ok(!(await render("imp", "uninstall.endVMs=false")).some((o) => o.metadata.annotations?.["helm.sh/hook"] !== undefined), "no hook when turned off");
  });

  it("renders deploy/rbac and deploy/crds themselves: one source, in the release namespace", async () => {
    const rbacDir = join(root, "deploy/rbac");
    const files = (await readdir(rbacDir)).filter((f) => f.endsWith(".yaml") && f !== "00-namespace.yaml");
    const shipped = (await Promise.all(files.map(async (f) => docs((await readFile(join(rbacDir, f), "utf8")).replaceAll("imp-system", "ci-system"))))).flat();
    const objs = await render("ci-system");
    const key = (o: Obj): string => `${o.kind}/${o.metadata.namespace ?? ""}/${o.metadata.name}`;
    const rendered = new Map(objs.map((o) => [key(o), o]));
    assert.ok(shipped.length >= 9);
    for (const o of shipped) assert.deepEqual(rendered.get(key(o)), o, `${key(o)} differs from deploy/rbac`);
    assert.ok(!JSON.stringify(objs).includes("imp-system"), "nothing names the default namespace when installed in another");
    const crdDir = join(root, "deploy/crds");
    for (const f of await readdir(crdDir)) {
      const crd = docs(await readFile(join(crdDir, f), "utf8"))[0] as Obj;
      const got = rendered.get(key(crd));
      assert.ok(got !== undefined, `${crd.metadata.name} not rendered`);
      assert.deepEqual(got["spec"], crd["spec"], `${crd.metadata.name}'s schema differs from deploy/crds`);
      assert.equal(got.metadata.annotations?.["helm.sh/resource-policy"], "keep");
    }
    assert.ok(!(await render("imp", "crds.install=false")).some((o) => o.kind === "CustomResourceDefinition"));
  });

  it("renders Imp's alert rules file as it is into a PrometheusRule, and a PodMonitor that scrapes every agent Pod's metrics port, only when asked", async () => {
    const plain = await render("imp");
    assert.ok(!plain.some((o) => o.kind === "PrometheusRule" || o.kind === "PodMonitor" || o.kind === "ServiceMonitor"), "no Prometheus Operator objects by default (their CRDs may be missing)");
    const objs = await render("imp", "metrics.prometheusRule.enabled=true", "metrics.serviceMonitor.enabled=true");
    const rule = objs.find((o) => o.kind === "PrometheusRule");
    const file = docs(await readFile(join(chart, "files/alerts.yaml"), "utf8"))[0] as unknown as { groups: Array<{ rules: Array<{ alert: string; annotations: Record<string, string> }> }> };
    assert.deepEqual(rule?.["spec"], file, "the PrometheusRule carries files/alerts.yaml unchanged (Prometheus's {{ $labels }} untouched by Helm)");
    // Every alert has its runbook section.
    const runbook = await readFile(join(root, "docs/operations.md"), "utf8");
    for (const r of file.groups.flatMap((g) => g.rules)) {
      assert.equal(r.annotations["runbook"], `docs/operations.md#${r.alert.toLowerCase()}`);
      assert.match(runbook, new RegExp(`^### ${r.alert}$`, "m"), `docs/operations.md has no runbook for ${r.alert}`);
    }
    const serviceMonitor = objs.find((o) => o.kind === "ServiceMonitor") as { spec: { endpoints: Array<{ honorLabels?: boolean }> } } | undefined;
    assert.equal(serviceMonitor?.spec.endpoints[0]?.honorLabels, true, "the operator's series keep their pools' namespace (not the operator's)");
    const podMonitor = objs.find((o) => o.kind === "PodMonitor") as { spec: { selector: { matchLabels: Record<string, string> }; podMetricsEndpoints: Array<{ port: string }> } } | undefined;
    const agent = objs.find((o) => o.kind === "DaemonSet") as { spec: { template: { metadata: { labels: Record<string, string> }; spec: { containers: Array<{ ports: Array<{ name: string }> }> } } } } | undefined;
    assert.ok(podMonitor !== undefined && agent !== undefined);
    for (const [k, v] of Object.entries(podMonitor.spec.selector.matchLabels)) assert.equal(agent.spec.template.metadata.labels[k], v, `the PodMonitor's selector ${k}=${v} matches the agent Pods`);
    assert.ok(agent.spec.template.spec.containers[0]?.ports.some((p) => p.name === podMonitor.spec.podMetricsEndpoints[0]?.port), "the PodMonitor's port is the agent container's");
  });

  it("renders Imp's Grafana dashboard as a ConfigMap with the sidecar's label, only when asked; every panel's query names a series Imp exports", async () => {
    assert.ok(!(await render("imp")).some((o) => o.metadata.name === "imp-grafana-dashboard"));
    const cm = (await render("imp", "metrics.grafanaDashboard.enabled=true", "metrics.grafanaDashboard.namespace=monitoring")).find((o) => o.metadata.name === "imp-grafana-dashboard") as (Obj & { data: Record<string, string> }) | undefined;
    assert.ok(cm !== undefined);
    assert.equal(cm.metadata.namespace, "monitoring");
    assert.equal(cm.metadata.labels?.["grafana_dashboard"], "1");
    const file = await readFile(join(chart, "files/dashboard.json"), "utf8");
    assert.deepEqual(JSON.parse(cm.data["imp-fleet.json"] ?? "{}"), JSON.parse(file), "the ConfigMap carries files/dashboard.json unchanged");
    // The series names in the queries, against those the code registers (a renamed metric breaks a panel).
    const exported = new Set<string>();
    for (const f of await readdir(join(root, "src"), { recursive: true })) {
      if (!f.endsWith(".ts") || f.endsWith(".test.ts")) continue;
      for (const m of (await readFile(join(root, "src", f), "utf8")).matchAll(/"((?:gha|imp)_[a-z_]+)"/g)) exported.add(m[1] ?? "");
    }
    const dashboard = JSON.parse(file) as { panels: Array<{ targets?: Array<{ expr: string }> }> };
    // A histogram's series carry _bucket/_sum/_count after the name the code registers.
    const used = new Set(dashboard.panels.flatMap((p) => p.targets ?? []).flatMap((t) => [...t.expr.matchAll(/\b(?:gha|imp)_[a-z_]+/g)].map((m) => (exported.has(m[0]) ? m[0] : m[0].replace(/_(bucket|sum|count)$/, "")))));
    assert.ok(used.size >= 10);
    for (const name of used) assert.ok(exported.has(name), `the dashboard queries ${name}, which src/ does not export`);
  });

  describe("on a real API server", () => {
    let plane: ControlPlane;
    const kube = (): string[] => ["--kubeconfig", plane.kubeconfigPath];
    const kubectl = async (...args: string[]): Promise<string> => (await exec(plane.binaries.kubectl, [...kube(), ...args], { timeout: 60_000 })).stdout;
    before(async () => {
      plane = await startControlPlane({ controllerManager: false });
    });
    after(async () => {
      await plane?.stop();
    });

    it("installs, upgrades and uninstalls: the CRDs and the pools and VMs of their kinds stay, nothing else does", async () => {
      const installed = Date.now();
      await helm(["install", "imp", chart, ...kube(), "--namespace", "imp-ci", "--create-namespace", "--wait=false"]);
      const installMs = Date.now() - installed;
      for (const crd of ["impvms", "impvmrunnerpools", "impnodes", "impvmclasses", "impvmtemplates"]) {
        await kubectl("wait", "--for=condition=Established", `crd/${crd}.imp.dev`, "--timeout=60s");
      }
      const names = (await kubectl("-n", "imp-ci", "get", "serviceaccount,configmap,service,deployment,daemonset,role,rolebinding,lease", "-o", "name")).split("\n").filter((l) => l !== "" && !l.includes("kube-root-ca") && !l.includes("serviceaccount/default"));
      assert.deepEqual(names.sort(), [
        "configmap/imp-agent",
        "daemonset.apps/imp-agent",
        "deployment.apps/imp-operator",
        "role.rbac.authorization.k8s.io/imp-agent-leases",
        "role.rbac.authorization.k8s.io/imp-operator-leases",
        "rolebinding.rbac.authorization.k8s.io/imp-agent-leases",
        "rolebinding.rbac.authorization.k8s.io/imp-operator-leases",
        "service/imp-operator-metrics",
        "serviceaccount/imp-agent",
        "serviceaccount/imp-operator",
      ]);
      assert.match(await kubectl("get", "validatingadmissionpolicy", "imp-agent-node-restriction", "-o", "jsonpath={.spec.matchConstraints.resourceRules[*].resources}"), /impnodes/);
      // The admission policy names the release's ServiceAccount, not imp-system's.
      assert.match(await kubectl("get", "validatingadmissionpolicy", "imp-agent-node-restriction", "-o", "yaml"), /system:serviceaccount:imp-ci:imp-agent/);
      assert.match(await kubectl("get", "validatingadmissionpolicy", "imp-cache-restriction", "-o", "yaml"), /system:serviceaccount:imp-ci:imp-operator/);
      // A user's object of an Imp kind, to outlive the uninstall.
      await exec(plane.binaries.kubectl, [...kube(), "apply", "-f", join(root, "deploy/samples/impvmclass-small.yaml")], { timeout: 60_000 });

      await helm(["upgrade", "imp", chart, ...kube(), "--namespace", "imp-ci", "--set", "operator.replicas=2", "--wait=false"]);
      assert.equal(await kubectl("-n", "imp-ci", "get", "deployment", "imp-operator", "-o", "jsonpath={.spec.replicas}"), "2");
      assert.match(await helm(["history", "imp", ...kube(), "--namespace", "imp-ci"]), /2\s.*deployed/);

      // No kubelet here, so the pre-delete hook's Job could never run: the real-node test runs it.
      await helm(["uninstall", "imp", ...kube(), "--namespace", "imp-ci", "--wait", "--no-hooks"]);
      const left = (await kubectl("-n", "imp-ci", "get", "serviceaccount,configmap,service,deployment,daemonset,role,rolebinding", "-o", "name")).split("\n").filter((l) => l !== "" && !l.includes("kube-root-ca") && !l.includes("serviceaccount/default"));
      assert.deepEqual(left, [], "namespaced objects of the release left");
      assert.equal((await kubectl("get", "clusterrole,clusterrolebinding,validatingadmissionpolicy,validatingadmissionpolicybinding", "-o", "name")).split("\n").filter((l) => l.includes("imp-")).length, 0, "cluster-wide objects of the release left");
      assert.match(await kubectl("get", "crd", "-l", "app.kubernetes.io/name=imp", "-o", "name"), /impvms\.imp\.dev/, "the CRDs are kept");
      assert.match(await kubectl("get", "impvmclass", "-o", "name"), /impvmclass\.imp\.dev\/small/, "and the user's objects with them");
      process.stdout.write(`# helm install (no --wait, 21 objects) took ${installMs} ms\n`);
    });
  });
});
