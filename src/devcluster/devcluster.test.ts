import { readFile, writeFile, chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { ImpError } from "../shared/index.ts";
import { ETCD_VERSION, KUBE_VERSION } from "./binaries.ts";
import { apiServerArgs, controllerManagerArgs, schedulerArgs } from "./component-args.ts";
import { parseStartTime } from "./detached-cluster.ts";
import { startControlPlane } from "./control-plane.ts";
import type { Pki } from "./pki.ts";

const pki: Pki = {
  caCert: "ca.crt", caKey: "ca.key", servingCert: "s.crt", servingKey: "s.key",
  adminCert: "a.crt", adminKey: "a.key", serviceAccountKey: "sa.key", serviceAccountPub: "sa.pub",
};

describe("component command lines", () => {
  it("give the controller manager exactly one --secure-port, the probed one", () => {
    const ports = controllerManagerArgs("kc", pki, 4321).filter((a) => a.startsWith("--secure-port="));
    assert.deepEqual(ports, ["--secure-port=4321"]);
  });
  it("bind the API server to loopback with client-certificate auth and RBAC", () => {
    const args = apiServerArgs({ port: 1234, etcdClientPort: 2379, pki, certDir: "d" });
    for (const flag of ["--bind-address=127.0.0.1", "--secure-port=1234", "--client-ca-file=ca.crt", "--authorization-mode=RBAC"]) {
      assert.ok(args.includes(flag), flag);
    }
  });
  it("serve real kubelets on the one address given, with the Node authorizer and NodeRestriction", () => {
    const args = apiServerArgs({ port: 1234, etcdClientPort: 2379, pki, certDir: "d", nodes: { address: "198.18.250.1" } });
    for (const flag of ["--bind-address=198.18.250.1", "--advertise-address=198.18.250.1", "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction", "--kubelet-preferred-address-types=InternalIP"]) {
      assert.ok(args.includes(flag), flag);
    }
    assert.ok(!args.includes("--bind-address=127.0.0.1") && !args.includes("--authorization-mode=RBAC"));
    assert.ok(controllerManagerArgs("kc", pki, 1, true).includes("--controllers=*"));
    assert.deepEqual(schedulerArgs("kc", 4322).filter((a) => a.startsWith("--secure-port=") || a.startsWith("--bind-address=")), ["--bind-address=127.0.0.1", "--secure-port=4322"]);
  });
});

describe("versions", () => {
  it("match between the build script and the harness", async () => {
    const script = await readFile(fileURLToPath(new URL("../../scripts/build-test-binaries.sh", import.meta.url)), "utf8");
    assert.match(script, new RegExp(`KUBE_VERSION="\\$\\{KUBE_VERSION:-${KUBE_VERSION}\\}"`));
    assert.match(script, new RegExp(`ETCD_VERSION="\\$\\{ETCD_VERSION:-${ETCD_VERSION}\\}"`));
  });
});

describe("parseStartTime()", () => {
  it("reads field 22 even when the command name holds spaces and parentheses", () => {
    const stat = "4242 (kube (api) server) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 12 0 987654 1000 50";
    assert.equal(parseStartTime(stat), "987654");
  });
});

describe("startControlPlane() with a component that cannot start", () => {
  const fakeBinaries = async (etcdScript: string): Promise<{ dir: string; binaries: { etcd: string; kubeApiserver: string; kubeControllerManager: string; kubectl: string } }> => {
    const dir = await mkdtemp(join(tmpdir(), "imp-fake-bin-"));
    const etcd = join(dir, "etcd");
    await writeFile(etcd, `#!/bin/sh\n${etcdScript}\n`);
    await chmod(etcd, 0o755);
    return { dir, binaries: { etcd, kubeApiserver: "/bin/false", kubeControllerManager: "/bin/false", kubectl: "/bin/false" } };
  };

  it("fails at once with the component's own last words, not after the readiness timeout", async () => {
    const { dir, binaries } = await fakeBinaries('echo "etcd: data dir is corrupt" >&2; exit 3');
    try {
      const err = await startControlPlane({ binaries, readyTimeoutMs: 120_000 }).catch((e: unknown) => e);
      assert.ok(err instanceof ImpError, String(err));
      assert.equal(err.code, "ComponentExited");
      assert.equal(err.errorClass, "terminal");
      assert.match(err.message, /Cannot start etcd: it exited with code 3/);
      assert.match(err.message, /data dir is corrupt/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("reports a lost port race as PortClash after retrying with new ports", async () => {
    const counter = join(tmpdir(), `imp-port-clash-${process.pid}`);
    const { dir, binaries } = await fakeBinaries(`echo x >> ${counter}; echo "listen tcp 127.0.0.1:2379: bind: address already in use" >&2; exit 1`);
    try {
      const err = await startControlPlane({ binaries }).catch((e: unknown) => e);
      assert.ok(err instanceof ImpError, String(err));
      assert.equal(err.code, "PortClash");
      assert.equal((await readFile(counter, "utf8")).trim().split("\n").length, 3, "three attempts");
    } finally {
      await rm(dir, { recursive: true, force: true });
      await rm(counter, { force: true });
    }
  });
});
