import assert from "node:assert/strict";
import { createHmac, randomUUID } from "node:crypto";
import { after, before, describe, it } from "node:test";
import { Registry } from "prom-client";
import { API_VERSION, type ImpVMRunnerPool, type WebhookSettings } from "../../api/index.ts";
import type { WorkflowJobEvent } from "../../forge/index.ts";
import { FakeResourceClient, keyOf, type Stored } from "../../kube/index.ts";
import { FakeClock, silentLogger } from "../../shared/index.ts";
import { IMP_VM_RUNNER_POOLS, SECRETS, type SecretObject } from "../resources.ts";
import { PoolWebhookSecrets, type WebhookAudience } from "./webhook-secrets.ts";
import { WEBHOOK_PATH, WebhookServer } from "./webhook-server.ts";

const b64 = (s: string): string => Buffer.from(s).toString("base64");
const sign = (body: string, secret: string): string => `sha256=${createHmac("sha256", secret).update(body).digest("hex")}`;
const payload = JSON.stringify({
  action: "queued",
  workflow_job: { id: 7, run_id: 8, name: "build", labels: ["imp"] },
  repository: { name: "web", full_name: "acme/web", owner: { login: "acme" } },
});

function pool(name: string, webhook: WebhookSettings): Stored<ImpVMRunnerPool> {
  return {
    apiVersion: API_VERSION,
    kind: IMP_VM_RUNNER_POOLS.kind as "ImpVMRunnerPool",
    metadata: { name, namespace: "ns", uid: `uid-${name}` },
    spec: {
      templateName: "runner",
      github: { credentialsSecretRef: { name: "app" }, apiURL: "http://127.0.0.1:9", scope: "repo", repository: "acme/web", runnerGroup: "Default", labels: ["imp"] },
      minIdle: 0,
      maxConcurrent: 2,
      scaleUpStep: 1,
      webhook,
      runnerCommand: ["/runner/run.sh"],
    },
  };
}

describe("webhook secrets from the pools' Secrets", () => {
  const clock = new FakeClock(1_700_000_000_000);
  const secrets = new FakeResourceClient<SecretObject>(SECRETS);
  let pools: Stored<ImpVMRunnerPool>[] = [];
  const received: Array<{ event: WorkflowJobEvent; audience: WebhookAudience }> = [];
  const stop = new AbortController();
  let running: Promise<void>;
  let url: string;
  const trust = new PoolWebhookSecrets({ poolCache: { list: () => pools }, secrets, clock, logger: silentLogger });

  before(async () => {
    await secrets.create({ apiVersion: "v1", kind: "Secret", metadata: { name: "hook-a", namespace: "ns" }, data: { secret: b64("secret-a-1\n") } });
    await secrets.create({ apiVersion: "v1", kind: "Secret", metadata: { name: "hook-b", namespace: "ns" }, data: { secret: b64("secret-b") } });
    pools = [pool("a", { enabled: true, secretRef: { name: "hook-a", key: "secret" } }), pool("b", { enabled: true, secretRef: { name: "hook-b", key: "secret" } })];
    const server = new WebhookServer({ secrets: [], trust: (forge, s) => trust.trusts(forge, s), onEvent: (_forge, event, audience) => received.push({ event, audience }), port: 0, host: "127.0.0.1", registry: new Registry(), logger: silentLogger });
    running = server.start(stop.signal);
    url = `${await server.listening()}${WEBHOOK_PATH}`;
  });
  after(async () => {
    stop.abort();
    await running;
  });

  /** Posts the payload signed with `secret`; returns the status and the pools the delivery reached. */
  const post = async (secret: string): Promise<{ status: number; audience: string[] | "all" | undefined }> => {
    const before = received.length;
    const r = await fetch(url, { method: "POST", headers: { "x-github-event": "workflow_job", "x-github-delivery": randomUUID(), "x-hub-signature-256": sign(payload, secret) }, body: payload });
    await r.arrayBuffer();
    const got = received.length > before ? received.at(-1)?.audience : undefined;
    return { status: r.status, audience: got === undefined ? undefined : got === "all" ? "all" : [...got].sort() };
  };

  it("a delivery signed with a pool's secret speaks for that pool only; an unknown secret is refused", async () => {
    assert.deepEqual(await post("secret-a-1"), { status: 202, audience: ["ns/a"] });
    assert.deepEqual(await post("secret-b"), { status: 202, audience: ["ns/b"] });
    assert.deepEqual(await post("secret-c"), { status: 401, audience: undefined });
  });

  it("rotation: the new and the previous secret are both accepted until previousSecretRef goes, with no restart", async () => {
    const old = await secrets.get({ namespace: "ns", name: "hook-a" });
    await secrets.patch({ namespace: "ns", name: "hook-a" }, { data: { secret: b64("secret-a-2"), previous: old.data?.["secret"] ?? "" } });
    pools = [pool("a", { enabled: true, secretRef: { name: "hook-a", key: "secret" }, previousSecretRef: { name: "hook-a", key: "previous" } }), pools[1] as Stored<ImpVMRunnerPool>];
    await clock.advance(10_000); // the Secret is read again once its cached copy is 10 s old
    assert.deepEqual(await post("secret-a-2"), { status: 202, audience: ["ns/a"] }, "the new secret works");
    assert.deepEqual(await post("secret-a-1"), { status: 202, audience: ["ns/a"] }, "and so does the one being replaced");
    pools = [pool("a", { enabled: true, secretRef: { name: "hook-a", key: "secret" } }), pools[1] as Stored<ImpVMRunnerPool>];
    assert.deepEqual(await post("secret-a-1"), { status: 401, audience: undefined }, "dropping previousSecretRef ends the old secret at once");
    assert.deepEqual(await post("secret-a-2"), { status: 202, audience: ["ns/a"] });
  });

  it("pools sharing one secret form one group; the operator's own secrets speak for every pool; a missing Secret counts for nothing", async () => {
    const shared = new PoolWebhookSecrets({
      poolCache: { list: () => [pool("a", { enabled: true, secretRef: { name: "hook-b", key: "secret" } }), pool("b", { enabled: true, secretRef: { name: "hook-b", key: "secret" } }), pool("c", { enabled: true, secretRef: { name: "nope", key: "secret" } }), pool("d", { enabled: false, secretRef: { name: "hook-a", key: "secret" } })] },
      secrets,
      operatorSecrets: ["app-wide"],
      clock,
      logger: silentLogger,
    });
    const groups = await shared.trusts();
    assert.deepEqual(
      groups.map((g) => ({ secrets: g.secrets, audience: g.audience === "all" ? "all" : [...g.audience].sort() })),
      [
        { secrets: ["app-wide"], audience: "all" },
        { secrets: ["secret-b"], audience: ["ns/a", "ns/b"] },
      ],
    );
    assert.equal(keyOf(pool("a", { enabled: false })), "ns/a");
  });

  it("a pool's Secret is read once per 10 s, however many deliveries arrive", async () => {
    const reads = secrets.calls.get;
    for (let i = 0; i < 5; i++) await trust.trusts();
    assert.equal(secrets.calls.get - reads, 0, "all served from the copy read in the tests above");
    await clock.advance(10_000);
    await trust.trusts();
    assert.equal(secrets.calls.get - reads, 2, "one read per Secret after the copies aged");
  });
});

describe("Gitea deliveries (/webhooks/gitea): only Gitea pools' own secrets sign them", () => {
  const clock = new FakeClock(1_700_000_000_000);
  const secrets = new FakeResourceClient<SecretObject>(SECRETS);
  const received: Array<{ forge: string; event: WorkflowJobEvent; audience: WebhookAudience }> = [];
  const stop = new AbortController();
  let running: Promise<void>;
  let base: string;
  const giteaPool = (name: string, secretName: string): Stored<ImpVMRunnerPool> => {
    const { github: _github, ...spec } = pool(name, { enabled: true, secretRef: { name: secretName, key: "secret" } }).spec;
    return { ...pool(name, { enabled: false }), spec: { ...spec, gitea: { url: "http://127.0.0.1:9", credentialsSecretRef: { name: "gitea-token" }, scope: "repo", repository: "acme/web", labels: ["imp"] } } } as Stored<ImpVMRunnerPool>;
  };
  const giteaBody = (action = "queued"): string =>
    JSON.stringify({ action, workflow_job: { id: 7, run_id: 8, name: "build", labels: ["imp"], started_at: "1970-01-01T00:00:00Z" }, repository: { name: "web", full_name: "acme/web", owner: { login: "acme" } }, organization: { name: "acme", username: "acme" } });

  before(async () => {
    await secrets.create({ apiVersion: "v1", kind: "Secret", metadata: { name: "hook-g", namespace: "ns" }, data: { secret: b64("gitea-secret") } });
    await secrets.create({ apiVersion: "v1", kind: "Secret", metadata: { name: "hook-a", namespace: "ns" }, data: { secret: b64("github-secret") } });
    const pools = [giteaPool("g", "hook-g"), pool("a", { enabled: true, secretRef: { name: "hook-a", key: "secret" } })];
    const trust = new PoolWebhookSecrets({ poolCache: { list: () => pools }, secrets, operatorSecrets: ["app-wide"], clock, logger: silentLogger });
    const server = new WebhookServer({ secrets: [], trust: (forge, s) => trust.trusts(forge, s), onEvent: (forge, event, audience) => received.push({ forge, event, audience }), port: 0, host: "127.0.0.1", registry: new Registry(), logger: silentLogger });
    running = server.start(stop.signal);
    base = await server.listening();
  });
  after(async () => {
    stop.abort();
    await running;
  });

  const postGitea = async (body: string, secret: string, delivery = randomUUID()): Promise<{ status: number; forge?: string; audience?: string[] | "all" }> => {
    const before = received.length;
    const hex = createHmac("sha256", secret).update(body).digest("hex");
    const r = await fetch(`${base}/webhooks/gitea`, { method: "POST", headers: { "x-gitea-event": "workflow_job", "x-gitea-delivery": delivery, "x-gitea-signature": hex }, body });
    await r.arrayBuffer();
    const got = received.length > before ? received.at(-1) : undefined;
    return { status: r.status, ...(got === undefined ? {} : { forge: got.forge, audience: got.audience === "all" ? "all" : [...got.audience].sort() }) };
  };

  it("signed with the Gitea pool's secret: accepted for that pool, as Gitea's; the operator's (GitHub App's) secret and a GitHub pool's are refused", async () => {
    assert.deepEqual(await postGitea(giteaBody(), "gitea-secret"), { status: 202, forge: "gitea", audience: ["ns/g"] });
    assert.deepEqual(await postGitea(giteaBody(), "app-wide"), { status: 401 });
    assert.deepEqual(await postGitea(giteaBody(), "github-secret"), { status: 401 });
  });

  it("the Gitea pool's secret does not sign on the GitHub path; the GitHub pool's still does", async () => {
    const post = async (secret: string): Promise<number> => {
      const r = await fetch(`${base}${WEBHOOK_PATH}`, { method: "POST", headers: { "x-github-event": "workflow_job", "x-github-delivery": randomUUID(), "x-hub-signature-256": sign(payload, secret) }, body: payload });
      await r.arrayBuffer();
      return r.status;
    };
    assert.equal(await post("gitea-secret"), 401);
    assert.equal(await post("github-secret"), 202);
    assert.equal(received.at(-1)?.forge, "github");
  });

  it("Gitea's `waiting` is answered 204 and reaches no pool; a repeated X-Gitea-Delivery is a duplicate, per forge", async () => {
    assert.deepEqual(await postGitea(giteaBody("waiting"), "gitea-secret"), { status: 204 });
    const id = randomUUID();
    assert.deepEqual(await postGitea(giteaBody(), "gitea-secret", id), { status: 202, forge: "gitea", audience: ["ns/g"] });
    assert.deepEqual(await postGitea(giteaBody(), "gitea-secret", id), { status: 200 });
    const r = await fetch(`${base}${WEBHOOK_PATH}`, { method: "POST", headers: { "x-github-event": "workflow_job", "x-github-delivery": id, "x-hub-signature-256": sign(payload, "github-secret") }, body: payload });
    await r.arrayBuffer();
    assert.equal(r.status, 202, "GitHub's delivery ids are another space: the same id from GitHub is new");
  });
});
