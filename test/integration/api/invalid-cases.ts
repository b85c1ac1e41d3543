/**
 * Objects the API server must reject, each with the field path its message must name. Every case
 * starts from a valid sample and breaks one thing, so a pass proves that one rule. `create` cases
 * are rejected on create; `update` cases first create the object (and its status), then make one
 * illegal change.
 */
import { sample } from "./samples.ts";
import type { AnyImpObject } from "./imp-client.ts";

type Json = Record<string, unknown>;
const spec = (o: AnyImpObject): Json => o.spec as Json;
const at = (o: Json, key: string): Json => o[key] as Json;

export interface CreateCase {
  readonly name: string;
  readonly object: () => AnyImpObject;
  /** Field path the server's message must name, e.g. `spec.maxConcurrent`. */
  readonly field: string;
}

const vm = (): AnyImpObject => sample("impvm-hello.yaml");
const vmFromTemplate = (): AnyImpObject => sample("impvm-from-template.yaml");
const cls = (): AnyImpObject => sample("impvmclass-small.yaml");
const tpl = (): AnyImpObject => sample("impvmtemplate-runner.yaml");
const pool = (): AnyImpObject => sample("impvmrunnerpool-org.yaml");
const env = (o: AnyImpObject): Json[] => at(spec(o), "workload")["env"] as Json[];

function edit(base: () => AnyImpObject, change: (o: AnyImpObject) => void): () => AnyImpObject {
  return () => {
    const o = base();
    change(o);
    return o;
  };
}

export const CREATE_CASES: readonly CreateCase[] = [
  { name: "class with 0 vCPUs (minimum)", field: "spec.vcpu", object: edit(cls, (o) => { spec(o)["vcpu"] = 0; }) },
  { name: "class with a size without binary unit (pattern)", field: "spec.scratchDisk", object: edit(cls, (o) => { spec(o)["scratchDisk"] = "8GB"; }) },
  { name: "class with an unknown arch (enum)", field: "spec.arch", object: edit(cls, (o) => { spec(o)["arch"] = "riscv64"; }) },
  { name: "class without memoryMiB (required)", field: "spec.memoryMiB", object: edit(cls, (o) => { delete spec(o)["memoryMiB"]; }) },
  { name: "template with a malformed image reference", field: "spec.image", object: edit(tpl, (o) => { spec(o)["image"] = "Not An Image!"; }) },
  { name: "template with a malformed expireAfter", field: "spec.expireAfter", object: edit(tpl, (o) => { spec(o)["expireAfter"] = "6 hours"; }) },
  { name: "template with restricted egress and no allowedCIDRs", field: "spec.network.allowedCIDRs", object: edit(tpl, (o) => { spec(o)["network"] = { egress: "restricted" }; }) },
  { name: "template with allowedCIDRs but internet egress", field: "spec.network.allowedCIDRs", object: edit(tpl, (o) => { spec(o)["network"] = { egress: "internet", allowedCIDRs: ["10.0.0.0/8"] }; }) },
  { name: "template with an invalid CIDR", field: "spec.network.allowedCIDRs[0]", object: edit(tpl, (o) => { spec(o)["network"] = { egress: "restricted", allowedCIDRs: ["10.0.0.0/33"] }; }) },
  { name: "VM with both templateRef and template", field: "spec.templateRef", object: edit(vm, (o) => { spec(o)["templateRef"] = { name: "ubuntu-runner" }; }) },
  { name: "VM with neither templateRef nor template", field: "spec.templateRef", object: edit(vm, (o) => { delete spec(o)["template"]; }) },
  { name: "VM with an inline template and no workload anywhere", field: "spec.workload", object: edit(vm, (o) => { delete spec(o)["workload"]; }) },
  { name: "VM env var with both value and valueFrom", field: "spec.workload.env[1].value", object: edit(vm, (o) => { env(o)[1]!["value"] = "literal"; }) },
  { name: "VM env var with neither value nor valueFrom", field: "spec.workload.env[0].value", object: edit(vm, (o) => { delete env(o)[0]!["value"]; }) },
  { name: "VM env var with a reserved IMP_ name", field: "spec.workload.env[0].name", object: edit(vm, (o) => { env(o)[0]!["name"] = "IMP_RUNNER_JITCONFIG"; }) },
  { name: "VM env var names duplicated", field: "spec.workload.env[1]", object: edit(vm, (o) => { env(o)[1] = { name: "GREETING", value: "again" }; }) },
  { name: "VM with an empty command", field: "spec.workload.command", object: edit(vm, (o) => { at(spec(o), "workload")["command"] = []; }) },
  { name: "VM with a relative workingDir", field: "spec.workload.workingDir", object: edit(vmFromTemplate, (o) => { at(spec(o), "workload")["workingDir"] = "src"; }) },
  { name: "VM whose name is not a DNS label", field: "metadata.name", object: edit(vm, (o) => { o.metadata.name = "hello.world"; }) },
  { name: "VM with an unknown lifecycle", field: "spec.lifecycle", object: edit(vm, (o) => { spec(o)["lifecycle"] = "persistent"; }) },
  { name: "pool with maxConcurrent below minIdle", field: "spec.maxConcurrent", object: edit(pool, (o) => { spec(o)["minIdle"] = 5; spec(o)["maxConcurrent"] = 3; }) },
  {
    name: "pool with scope repo and no repository",
    field: "spec.github.repository",
    object: edit(pool, (o) => { const g = at(spec(o), "github"); g["scope"] = "repo"; delete g["organization"]; }),
  },
  { name: "pool with scope org and no organization", field: "spec.github.organization", object: edit(pool, (o) => { delete at(spec(o), "github")["organization"]; }) },
  {
    name: "pool with scope enterprise and no enterprise",
    field: "spec.github.enterprise",
    object: edit(pool, (o) => { const g = at(spec(o), "github"); g["scope"] = "enterprise"; delete g["organization"]; }),
  },
  {
    name: "pool with a repository besides its organization",
    field: "spec.github.scope",
    object: edit(pool, (o) => { at(spec(o), "github")["repository"] = "example/app"; }),
  },
  { name: "pool with a malformed repository", field: "spec.github.repository", object: edit(pool, (o) => { const g = at(spec(o), "github"); g["scope"] = "repo"; delete g["organization"]; g["repository"] = "no-slash"; }) },
  { name: "pool webhook enabled without a secret", field: "spec.webhook.secretRef", object: edit(pool, (o) => { delete at(spec(o), "webhook")["secretRef"]; }) },
  { name: "pool in scale-set mode with the webhook on", field: "spec.webhook.enabled", object: edit(pool, (o) => { at(spec(o), "github")["scaleSet"] = { name: "imp-linux" }; }) },
  { name: "pool with a scale set name longer than 45", field: "spec.github.scaleSet.name", object: edit(pool, (o) => { at(spec(o), "github")["scaleSet"] = { name: "s".repeat(46) }; at(spec(o), "webhook")["enabled"] = false; }) },
  { name: "pool cache path with a .. segment", field: "spec.cache.paths", object: edit(pool, (o) => { spec(o)["cache"] = { size: "1Gi", paths: ["/home/runner/../../etc"] }; }) },
  { name: "pool cache path over the guest's own /proc", field: "spec.cache.paths", object: edit(pool, (o) => { spec(o)["cache"] = { size: "1Gi", paths: ["/var/lib/docker", "/proc/self"] }; }) },
  { name: "pool cache path with a comma (pattern)", field: "spec.cache.paths[0]", object: edit(pool, (o) => { spec(o)["cache"] = { size: "1Gi", paths: ["/a,/b"] }; }) },
  { name: "pool cache below 64Mi", field: "spec.cache.size", object: edit(pool, (o) => { spec(o)["cache"] = { size: "32Mi", paths: ["/var/lib/docker"] }; }) },
  { name: "pool cache above 1Ti", field: "spec.cache.size", object: edit(pool, (o) => { spec(o)["cache"] = { size: "2Ti", paths: ["/var/lib/docker"] }; }) },
  { name: "VM cache volume that is not a DNS label", field: "spec.cache.volume", object: edit(vm, (o) => { spec(o)["cache"] = { volume: "../other", size: "1Gi", paths: ["/var/lib/docker"] }; }) },
  { name: "pool without runnerCommand", field: "spec.runnerCommand", object: edit(pool, (o) => { delete spec(o)["runnerCommand"]; }) },
  { name: "pool without labels", field: "spec.github.labels", object: edit(pool, (o) => { at(spec(o), "github")["labels"] = []; }) },
  { name: "pool whose name leaves no room for generated VM names", field: "metadata.name", object: edit(pool, (o) => { o.metadata.name = "p".repeat(58); }) },
];

export interface UpdateCase {
  readonly name: string;
  readonly object: () => AnyImpObject;
  /** Status written (through the status subresource) after create, before the illegal change. */
  readonly initialStatus?: Json;
  /** Applies the illegal change to the object as read back. */
  readonly change: (o: AnyImpObject) => void;
  readonly subresource: "main" | "status";
  readonly field: string;
}

const now = new Date().toISOString().replace(/\.\d+Z$/, "Z");

export const UPDATE_CASES: readonly UpdateCase[] = [
  { name: "VM spec changed after creation", object: vm, subresource: "main", field: "spec", change: (o) => { at(spec(o), "workload")["command"] = ["/bin/true"]; } },
  {
    name: "VM status leaves terminal phase Failed",
    object: vm,
    subresource: "status",
    field: "status.phase",
    initialStatus: { phase: "Failed", reason: "BootTimeout", nodeName: "worker-1", phaseTimestamps: { failed: now } },
    change: (o) => { (o.status as Json)["phase"] = "Running"; },
  },
  {
    name: "VM status moves backwards from Running to Booting",
    object: vm,
    subresource: "status",
    field: "status.phase",
    initialStatus: { phase: "Running", nodeName: "worker-1" },
    change: (o) => { (o.status as Json)["phase"] = "Booting"; },
  },
  {
    name: "VM cache decision flipped from Discard to Promote",
    object: vm,
    subresource: "status",
    field: "status.cache.promotion",
    initialStatus: { phase: "Succeeded", exitCode: 0, nodeName: "worker-1", cache: { promotion: { decision: "Discard", reason: "UntrustedEvent" } } },
    change: (o) => { ((o.status as Json)["cache"] as Json)["promotion"] = { decision: "Promote", reason: "Trusted", jobCompletedAt: now }; },
  },
  {
    name: "VM cache promotion without the job's completion time",
    object: vm,
    subresource: "status",
    field: "status.cache.promotion.jobCompletedAt",
    initialStatus: { phase: "Succeeded", exitCode: 0, nodeName: "worker-1" },
    change: (o) => { (o.status as Json)["cache"] = { promotion: { decision: "Promote", reason: "Trusted" } }; },
  },
  {
    name: "VM status moves to another node",
    object: vm,
    subresource: "status",
    field: "status.nodeName",
    initialStatus: { phase: "Scheduled", nodeName: "worker-1" },
    change: (o) => { (o.status as Json)["nodeName"] = "worker-2"; },
  },
  {
    name: "VM status Running without a node",
    object: vm,
    subresource: "status",
    field: "status.nodeName",
    initialStatus: { phase: "Pending" },
    change: (o) => { (o.status as Json)["phase"] = "Running"; },
  },
  {
    name: "VM status Succeeded with a non-zero exit code",
    object: vm,
    subresource: "status",
    field: "status.exitCode",
    initialStatus: { phase: "Running", nodeName: "worker-1" },
    change: (o) => { Object.assign(o.status as Json, { phase: "Succeeded", exitCode: 3 }); },
  },
  {
    name: "VM status guestIP that is not an IP",
    object: vm,
    subresource: "status",
    field: "status.guestIP",
    initialStatus: { phase: "Booting", nodeName: "worker-1" },
    change: (o) => { (o.status as Json)["guestIP"] = "10.0.0.300"; },
  },
  {
    name: "VM status runner identity rewritten",
    object: vm,
    subresource: "status",
    field: "status.runner",
    initialStatus: { phase: "Pending", runner: { id: 17, name: "x" } },
    change: (o) => { (o.status as Json)["runner"] = { id: 18, name: "x" }; },
  },
  {
    name: "node status lists an unknown VMM",
    object: () => sample("impnode-worker-1.yaml"),
    subresource: "status",
    field: "status.vmms[0]",
    initialStatus: { kvm: false, vmms: ["qemu"] },
    change: (o) => { (o.status as Json)["vmms"] = ["kvmtool"]; },
  },
];
