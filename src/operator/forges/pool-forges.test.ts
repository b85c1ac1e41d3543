import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { API_VERSION, GITHUB_APP_SECRET_KEYS, type ImpVMRunnerPool } from "../../api/index.ts";
import { FakeResourceClient } from "../../kube/index.ts";
import { ImpError, silentLogger } from "../../shared/index.ts";
import { IMP_VM_RUNNER_POOLS, SECRETS, type SecretObject } from "../resources.ts";
import { PoolForges, TOKEN_SECRET_KEY } from "./pool-forges.ts";

const b64 = (s: string): string => Buffer.from(s).toString("base64");

function pool(scope: "repo" | "enterprise"): ImpVMRunnerPool {
  return {
    apiVersion: API_VERSION,
    kind: IMP_VM_RUNNER_POOLS.kind as "ImpVMRunnerPool",
    metadata: { name: "p", namespace: "ns" },
    spec: {
      templateName: "runner",
      github: {
        credentialsSecretRef: { name: "creds" },
        apiURL: "http://127.0.0.1:9",
        scope,
        ...(scope === "repo" ? { repository: "acme/web" } : { enterprise: "acme-corp" }),
        runnerGroup: "Default",
        labels: ["imp"],
      },
      minIdle: 0,
      maxConcurrent: 1,
      scaleUpStep: 1,
      runnerCommand: ["/runner/run.sh"],
    },
  };
}

async function clientsWith(data: Record<string, string>): Promise<PoolForges> {
  const secrets = new FakeResourceClient<SecretObject>(SECRETS);
  await secrets.create({ apiVersion: "v1", kind: "Secret", metadata: { name: "creds", namespace: "ns" }, data });
  return new PoolForges({ secrets, logger: silentLogger });
}

const APP_KEYS = { [GITHUB_APP_SECRET_KEYS.appId]: b64("1"), [GITHUB_APP_SECRET_KEYS.installationId]: b64("2"), [GITHUB_APP_SECRET_KEYS.privateKey]: b64("not a key") };

describe("PoolForges credentials", () => {
  it("an enterprise pool whose Secret has only App keys is refused with what to put there", async () => {
    const clients = await clientsWith(APP_KEYS);
    await assert.rejects(clients.gitHubFor(pool("enterprise")), (err: unknown) => {
      assert.ok(err instanceof ImpError);
      assert.equal(err.code, "CredentialsSecretInvalid");
      assert.equal(err.errorClass, "terminal");
      assert.match(err.message, /no key token/);
      assert.match(err.message, /manage_runners:enterprise/);
      return true;
    });
  });

  it("a Secret with a token is used as a token, for enterprise and for any other scope, App keys beside it ignored", async () => {
    for (const scope of ["enterprise", "repo"] as const) {
      const clients = await clientsWith({ ...APP_KEYS, [TOKEN_SECRET_KEY]: b64("ghp_example\n") });
      // With the App keys above ("not a key"), building an App client would fail; a token client does not.
      const gh = await clients.gitHubFor(pool(scope));
      assert.equal(gh.scope.kind, scope);
    }
  });

  it("an empty token counts as no token", async () => {
    const clients = await clientsWith({ [TOKEN_SECRET_KEY]: "" });
    await assert.rejects(clients.gitHubFor(pool("enterprise")), /no key token/);
    await assert.rejects(clients.gitHubFor(pool("repo")), /no key appId/);
  });
});
