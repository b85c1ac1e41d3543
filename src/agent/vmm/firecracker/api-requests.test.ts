import { describe, it, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parse } from "yaml";
import { Ajv, type ValidateFunction } from "ajv";
import addFormatsModule from "ajv-formats";
import { ImpError } from "../../../shared/index.ts";
import type { VmSpec } from "../types.ts";
import { actionRequest, configRequests, PAUSE_VM, restoreConfigRequests, snapshotCreateRequest, snapshotLoadRequest, type FirecrackerRequest } from "./api-requests.ts";
import { jailedLayout, unjailedLayout } from "./layout.ts";

// The Firecracker API descriptions (Swagger 2.0) live beside the repository, not in it.
const REFERENCE_DIR = resolve(import.meta.dirname, "../../../../../shared/reference/firecracker");
const VERSIONS = ["1.12.1", "1.16.1"] as const;

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
interface SwaggerDoc {
  readonly paths: Record<string, Record<string, { parameters?: { in: string; schema?: { $ref: string } }[]; responses: Record<string, unknown> }>>;
  readonly definitions: Record<string, Json>;
}

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv;
const KNOWN_FORMATS = new Set(["int32", "int64", "date", "time", "date-time", "uri", "email", "hostname", "ipv4", "ipv6", "uuid", "regex"]);

/**
 * Swagger 2.0 definitions → JSON Schema draft-07, made strict on purpose: every object schema gets
 * `additionalProperties: false`, so a field Firecracker does not declare fails here instead of being
 * silently ignored (or refused) by a VMM version. `example` is not a JSON Schema keyword; a `format`
 * that is really a regular expression (the MMDS address) becomes a `pattern`.
 */
function toJsonSchema(node: Json): Json {
  if (Array.isArray(node)) return node.map(toJsonSchema);
  if (node === null || typeof node !== "object") return node;
  const out: { [key: string]: Json } = {};
  for (const [key, value] of Object.entries(node)) {
    if (key === "example" || key.startsWith("x-")) continue;
    if (key === "format" && typeof value === "string" && !KNOWN_FORMATS.has(value)) {
      out.pattern = `^${value}$`;
      continue;
    }
    out[key] = key === "properties" && value !== null && typeof value === "object" && !Array.isArray(value)
      ? Object.fromEntries(Object.entries(value).map(([name, schema]) => [name, toJsonSchema(schema)]))
      : toJsonSchema(value);
  }
  if (out.type === "object" && out.properties !== undefined && out.additionalProperties === undefined) out.additionalProperties = false;
  return out;
}

interface Spec {
  readonly version: string;
  readonly doc: SwaggerDoc;
  validatorFor(route: string, method: string): { validate: ValidateFunction; responses: string[] };
}

function loadSpec(version: string): Spec | undefined {
  const file = join(REFERENCE_DIR, `firecracker-v${version}.yaml`);
  if (!existsSync(file)) return undefined;
  const doc = parse(readFileSync(file, "utf8")) as SwaggerDoc;
  const ajv = new Ajv({ strict: true, allErrors: true });
  addFormats(ajv);
  ajv.addFormat("int32", { type: "number", validate: (n: number) => Number.isInteger(n) && n >= -(2 ** 31) && n < 2 ** 31 });
  ajv.addFormat("int64", { type: "number", validate: (n: number) => Number.isSafeInteger(n) });
  ajv.addSchema({ $id: "fc", definitions: toJsonSchema(doc.definitions) });
  return {
    version,
    doc,
    validatorFor(route, method) {
      const operation = doc.paths[route]?.[method.toLowerCase()];
      assert.ok(operation !== undefined, `v${version} has no ${method} ${route}`);
      const ref = operation.parameters?.find((p) => p.in === "body")?.schema?.$ref;
      assert.ok(ref !== undefined, `v${version} ${method} ${route} takes no body`);
      return { validate: ajv.compile({ $ref: `fc${ref}` }), responses: Object.keys(operation.responses) };
    },
  };
}

const specs = VERSIONS.map(loadSpec);
function specsOrSkip(t: TestContext): Spec[] {
  const loaded = specs.filter((s): s is Spec => s !== undefined);
  if (loaded.length !== VERSIONS.length) {
    t.skip(`Firecracker API descriptions not found in ${REFERENCE_DIR} (expected firecracker-v{${VERSIONS.join(",")}}.yaml)`);
    return [];
  }
  return loaded;
}

const fullSpec: VmSpec = {
  name: "ci-job-42",
  dir: "/var/lib/imp/vms/ci-job-42",
  vcpus: 2,
  memoryMiB: 512,
  kernel: "/var/lib/imp/kernels/vmlinux",
  initrd: "/var/lib/imp/kernels/initrd.cpio.gz",
  cmdline: "console=ttyS0 reboot=k panic=1 pci=off ro root=/dev/vda init=/.imp/imp-guest imp.scratch=/dev/vdb",
  drives: [
    { id: "scratch", path: "/var/lib/imp/vms/ci-job-42/scratch.ext4", readOnly: false, isRoot: false },
    { id: "root", path: "/var/lib/imp/images/abc.ext4", readOnly: true, isRoot: true },
  ],
  network: { tap: "imp-t42", mac: "06:00:AC:10:00:02" },
  guestCid: 42,
};

function assertValid(spec: Spec, request: FirecrackerRequest): void {
  const { validate, responses } = spec.validatorFor(request.route, request.method);
  assert.ok(responses.includes("204"), `v${spec.version} ${request.method} ${request.route} does not answer 204`);
  const ok = validate(request.body);
  assert.ok(ok, `v${spec.version} refuses ${request.method} ${request.path} ${JSON.stringify(request.body)}: ${JSON.stringify(validate.errors)}`);
}

describe("Firecracker request bodies against the published API descriptions", () => {
  it("every configuration request and every action validates against v1.12.1 and v1.16.1", (t) => {
    for (const spec of specsOrSkip(t)) {
      for (const layout of [unjailedLayout(fullSpec), jailedLayout(fullSpec, { chrootBaseDir: "/srv/jailer", firecrackerBinary: "/usr/bin/firecracker" })]) {
        for (const request of configRequests(fullSpec, layout.vmm)) {
          assert.ok(request.path.startsWith("/"));
          assertValid(spec, request);
        }
      }
      for (const action of ["InstanceStart", "SendCtrlAltDel", "FlushMetrics"] as const) assertValid(spec, actionRequest(action));
    }
  });

  it("the snapshot requests (pause, create, the restore's logger and metrics, load) validate against v1.12.1 and v1.16.1", (t) => {
    const snapshotSpec: VmSpec = { ...fullSpec, memorySnapshot: { role: "restore", memoryFile: "/var/lib/imp/snapshots/k/memory", statePath: "/var/lib/imp/vms/ci-job-42/state" } };
    for (const spec of specsOrSkip(t)) {
      assertValid(spec, PAUSE_VM);
      assertValid(spec, snapshotCreateRequest("/var/lib/imp/snapshots/.building-k/state", "/var/lib/imp/snapshots/.building-k/memory"));
      for (const request of restoreConfigRequests(unjailedLayout(snapshotSpec).vmm)) assertValid(spec, request);
      assertValid(spec, snapshotLoadRequest({ statePath: "/s", memoryFile: "/m", tap: "imp-t42" }));
      assertValid(spec, snapshotLoadRequest({ statePath: "/s", memoryFile: "/m" }));
    }
  });

  it("a minimal spec (no initrd, no network, one drive) validates too", (t) => {
    const minimal: VmSpec = { ...fullSpec, drives: [fullSpec.drives[1]!] };
    delete (minimal as { initrd?: string }).initrd;
    delete (minimal as { network?: unknown }).network;
    for (const spec of specsOrSkip(t)) {
      for (const request of configRequests(minimal, unjailedLayout(minimal).vmm)) assertValid(spec, request);
    }
  });

  it("the strict validator itself refuses an undeclared field, a missing required field and a wrong type", (t) => {
    for (const spec of specsOrSkip(t)) {
      const drive = spec.validatorFor("/drives/{drive_id}", "PUT").validate;
      assert.equal(drive({ drive_id: "root", is_root_device: true, path_on_host: "/x", is_read_only: true, bogus: 1 }), false);
      assert.equal(drive({ path_on_host: "/x", is_read_only: true }), false);
      const machine = spec.validatorFor("/machine-config", "PUT").validate;
      assert.equal(machine({ vcpu_count: "2", mem_size_mib: 512 }), false);
      assert.equal(machine({ vcpu_count: 33, mem_size_mib: 512 }), false);
      const vsock = spec.validatorFor("/vsock", "PUT").validate;
      assert.equal(vsock({ guest_cid: 2, uds_path: "/v.sock" }), false);
    }
  });
});

describe("configRequests()", () => {
  it("sends logger and metrics first, then machine, boot source, root drive before others, network, vsock", () => {
    const requests = configRequests(fullSpec, unjailedLayout(fullSpec).vmm);
    assert.deepEqual(
      requests.map((r) => r.path),
      ["/logger", "/metrics", "/machine-config", "/boot-source", "/drives/root", "/drives/scratch", "/network-interfaces/eth0", "/vsock", "/entropy"],
    );
    assert.deepEqual(requests.find((r) => r.path === "/boot-source")?.body, {
      kernel_image_path: fullSpec.kernel,
      boot_args: fullSpec.cmdline,
      initrd_path: fullSpec.initrd,
    });
    assert.deepEqual(requests.find((r) => r.path === "/drives/root")?.body, { drive_id: "root", path_on_host: "/var/lib/imp/images/abc.ext4", is_root_device: true, is_read_only: true });
    assert.deepEqual(requests.find((r) => r.path === "/network-interfaces/eth0")?.body, { iface_id: "eth0", host_dev_name: "imp-t42", guest_mac: "06:00:ac:10:00:02" });
    assert.deepEqual(requests.find((r) => r.path === "/vsock")?.body, { guest_cid: 42, uds_path: "/var/lib/imp/vms/ci-job-42/vsock.sock" });
  });

  it("for a memory snapshot's VM, names its own disks and vsock socket relative to its directory (a restore opens its own)", () => {
    const template: VmSpec = { ...fullSpec, memorySnapshot: { role: "template", memoryFile: "/var/lib/imp/snapshots/.building-k/memory" } };
    const paths = unjailedLayout(template).vmm;
    assert.equal(paths.drives.get("scratch"), "./scratch.ext4");
    assert.equal(paths.drives.get("root"), "/var/lib/imp/images/abc.ext4", "a file further away keeps its path");
    // The node agent's layout: the VMM directory inside the VM's, the disks beside it.
    const agentLayout: VmSpec = { ...template, dir: "/var/lib/imp/vms/u1/vmm", drives: [{ id: "root", path: "/var/lib/imp/vms/u1/base.ext4", readOnly: true, isRoot: true }, { id: "scratch", path: "/var/lib/imp/vms/u1/scratch.ext4", readOnly: false, isRoot: false }] };
    assert.deepEqual([...unjailedLayout(agentLayout).vmm.drives.values()], ["../base.ext4", "../scratch.ext4"]);
    assert.equal(unjailedLayout(agentLayout).vmm.vsockUds, "./vsock.sock");
    assert.equal(unjailedLayout({ ...agentLayout, drives: [{ id: "root", path: "/var/lib/imp/vms/other/base.ext4", readOnly: true, isRoot: true }] }).vmm.drives.get("root"), "/var/lib/imp/vms/other/base.ext4", "another VM's file is never named relatively");
    assert.equal(paths.vsockUds, "./vsock.sock");
    assert.equal(paths.logFile, "/var/lib/imp/vms/ci-job-42/firecracker.log", "the logger is configured per process, never in a snapshot");
    assert.equal(unjailedLayout(fullSpec).vmm.drives.get("scratch"), "/var/lib/imp/vms/ci-job-42/scratch.ext4", "a booted VM keeps host paths");
    assert.deepEqual(snapshotLoadRequest({ statePath: "/s", memoryFile: "/m", tap: "imp-t42" }).body, {
      snapshot_path: "/s",
      mem_backend: { backend_type: "File", backend_path: "/m" },
      resume_vm: true,
      network_overrides: [{ iface_id: "eth0", host_dev_name: "imp-t42" }],
    });
  });

  it("jailed, every path is inside the chroot", () => {
    const layout = jailedLayout(fullSpec, { chrootBaseDir: "/srv/jailer", firecrackerBinary: "/usr/bin/firecracker" });
    const bodies = configRequests(fullSpec, layout.vmm).map((r) => r.body ?? {});
    const paths = bodies.flatMap((b) => Object.entries(b).filter(([k]) => /path/.test(k)).map(([, v]) => String(v)));
    assert.deepEqual(paths.sort(), ["/drive-root", "/drive-scratch", "/firecracker.log", "/firecracker.metrics", "/initrd", "/kernel", "/vsock.sock"]);
    assert.equal(layout.host.vsockUds, "/srv/jailer/firecracker/ci-job-42/root/vsock.sock");
    assert.equal(layout.host.logFile, "/var/lib/imp/vms/ci-job-42/firecracker.log");
  });

  it("refuses what Firecracker would refuse, before any process exists", () => {
    const paths = unjailedLayout(fullSpec).vmm;
    assert.throws(() => configRequests({ ...fullSpec, vcpus: 33 }, paths), /1\.\.32/);
    assert.throws(() => configRequests({ ...fullSpec, guestCid: 2 }, paths), /guest CID/);
    assert.throws(() => configRequests({ ...fullSpec, drives: fullSpec.drives.map((d) => ({ ...d, isRoot: true })) }, paths), /2 drives are marked root/);
    assert.throws(() => configRequests({ ...fullSpec, drives: [{ ...fullSpec.drives[1]!, id: "root/../x" }] }, paths), /Cannot attach drive/);
    assert.throws(() => configRequests({ ...fullSpec, drives: [...fullSpec.drives, { id: "cache", path: "/c.qcow2", readOnly: false, isRoot: false, format: "qcow2", backing: "/g.raw" }] }, paths), /raw files only/);
    assert.throws(() => configRequests({ ...fullSpec, network: { tap: "a-very-long-tap-name", mac: "06:00:00:00:00:01" } }, paths), /Cannot attach tap/);
    assert.throws(() => configRequests({ ...fullSpec, network: { tap: "tap0", mac: "06:00:00:00:00" } }, paths), /MAC/);
    assert.throws(() => configRequests({ ...fullSpec, cmdline: "x".repeat(2048) }, paths), /2048 bytes/);
    assert.throws(() => configRequests({ ...fullSpec, vcpus: 0 }, paths), (err: unknown) => err instanceof ImpError && err.code === "VmSpecInvalid" && err.errorClass === "terminal");
  });
});
