// Authentication against real docker-registry instances sharing one storage: htpasswd basic auth, and
// token auth where the registry trusts our test token server (Docker token spec, RS256 JWT with x5c).
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { FakeClock } from "../../../src/shared/index.ts";
import { credentialsFromSecretData, FsContentStore, ImagePuller, pullImage } from "../../../src/agent/image/pull/index.ts";
import { buildImage, busyboxLayer, type TestImage } from "../../harness/oci-image.ts";
import { pushImage, startRegistry, startTokenServer, type RunningRegistry, type TokenServer } from "../../harness/registry.ts";

const amd64 = { os: "linux", architecture: "amd64" };
const users = { ci: "s3cret-pass" };

/** A Secret's `data` as the Kubernetes API returns it for type kubernetes.io/dockerconfigjson. */
const secretData = (auths: Record<string, unknown>): Record<string, string> => ({
  ".dockerconfigjson": Buffer.from(JSON.stringify({ auths })).toString("base64"),
});

describe("registry authentication", () => {
  let open: RunningRegistry;
  let basic: RunningRegistry;
  let tokenRegistry: RunningRegistry;
  let tokens: TokenServer;
  let image: TestImage;
  let work: string;

  before(async () => {
    work = await mkdtemp(join(tmpdir(), "imp-auth-"));
    open = await startRegistry();
    image = buildImage([await busyboxLayer("gzip")], { platform: amd64 });
    await pushImage(open.url, "private/app", "1", image);
    basic = await startRegistry({ rootDir: open.rootDir, auth: { kind: "htpasswd", users } });
    tokens = await startTokenServer({ users });
    tokenRegistry = await startRegistry({ rootDir: open.rootDir, auth: { kind: "token", tokenServer: tokens } });
  });
  after(async () => {
    await Promise.all([open.stop(), basic.stop(), tokenRegistry.stop()]);
    await tokens.stop();
    await rm(work, { recursive: true, force: true });
  });

  const store = (name: string): Promise<FsContentStore> => FsContentStore.open(join(work, name));

  it("basic auth: pulls with credentials from a dockerconfigjson Secret (auth field)", async () => {
    const auth = credentialsFromSecretData(secretData({ [`http://${basic.host}/v1/`]: { auth: Buffer.from(`ci:${users.ci}`).toString("base64") } }));
    const pulled = await pullImage(`${basic.host}/private/app:1`, { store: await store("basic-ok"), platform: amd64, auth });
    assert.equal(pulled.manifestDigest, image.manifest.digest);
  });

  it("basic auth: a wrong password is a terminal error naming the user, not a retry loop", async () => {
    const auth = credentialsFromSecretData(secretData({ [basic.host]: { username: "ci", password: "wrong" } }));
    await assert.rejects(pullImage(`${basic.host}/private/app:1`, { store: await store("basic-bad"), platform: amd64, auth }), (err: Error & { code?: string; errorClass?: string }) => {
      assert.equal(err.code, "Unauthorized");
      assert.equal(err.errorClass, "terminal");
      assert.match(err.message, /rejected the credentials of user ci/);
      assert.doesNotMatch(err.message, /wrong/);
      return true;
    });
  });

  it("basic auth: no credentials configured says so", async () => {
    await assert.rejects(pullImage(`${basic.host}/private/app:1`, { store: await store("basic-none"), platform: amd64 }), /requires credentials and none are configured/);
  });

  it("bearer: follows the challenge to the token server and pulls; the token is cached across pulls", async () => {
    tokens.requests.length = 0;
    const auth = credentialsFromSecretData(secretData({ [tokenRegistry.host]: { username: "ci", password: users.ci } }));
    const puller = new ImagePuller({ credentials: auth });
    const first = await puller.pull(`${tokenRegistry.host}/private/app:1`, { store: await store("bearer-1"), platform: amd64 });
    assert.equal(first.manifestDigest, image.manifest.digest);
    assert.deepEqual(tokens.requests, [{ scope: "repository:private/app:pull", user: "ci" }]);
    await puller.pull(`${tokenRegistry.host}/private/app:1`, { store: await store("bearer-2"), platform: amd64 });
    assert.equal(tokens.requests.length, 1, "second pull reuses the cached token");
    assert.equal(puller.auth.tokenRequests, 1);
  });

  it("bearer: a cached token is replaced once it expires (expires_in from the token server)", async () => {
    tokens.requests.length = 0;
    const clock = new FakeClock(Date.now());
    const auth = credentialsFromSecretData(secretData({ [tokenRegistry.host]: { username: "ci", password: users.ci } }));
    const puller = new ImagePuller({ credentials: auth, clock });
    await puller.pull(`${tokenRegistry.host}/private/app:1`, { store: await store("expiry-1"), platform: amd64 });
    await clock.advance(200_000);
    await puller.pull(`${tokenRegistry.host}/private/app:1`, { store: await store("expiry-2"), platform: amd64 });
    assert.equal(tokens.requests.length, 1, "still valid after 200 s of a 300 s token");
    await clock.advance(100_000);
    await puller.pull(`${tokenRegistry.host}/private/app:1`, { store: await store("expiry-3"), platform: amd64 });
    assert.equal(tokens.requests.length, 2, "a new token after expiry");
  });

  it("bearer: the token server refusing the credentials is a terminal error", async () => {
    const auth = credentialsFromSecretData(secretData({ [tokenRegistry.host]: { username: "ci", password: "nope" } }));
    await assert.rejects(pullImage(`${tokenRegistry.host}/private/app:1`, { store: await store("bearer-bad"), platform: amd64, auth }), (err: Error & { code?: string }) => {
      assert.equal(err.code, "Unauthorized");
      assert.match(err.message, /credentials of user ci rejected/);
      return true;
    });
  });

  it("bearer: an anonymous token without pull access ends in a clear error", async () => {
    const anonymousTokens = await startTokenServer({ users, allowAnonymous: true });
    // The registry trusts a different issuer certificate, so this server's tokens are all rejected.
    const mismatched = await startRegistry({ rootDir: open.rootDir, auth: { kind: "token", tokenServer: { ...tokens, realm: anonymousTokens.realm } } });
    try {
      await assert.rejects(pullImage(`${mismatched.host}/private/app:1`, { store: await store("bearer-anon"), platform: amd64 }), (err: Error & { code?: string }) => {
        assert.equal(err.code, "Unauthorized");
        assert.match(err.message, /no credentials are configured/);
        return true;
      });
    } finally {
      await mismatched.stop();
      await anonymousTokens.stop();
    }
  });
});
