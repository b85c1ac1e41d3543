import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { FakeClock } from "../../../shared/index.ts";
import { RegistryAuth } from "./registry-auth.ts";

/** A token endpoint stand-in injected through the constructor; records what it was asked. */
function tokenEndpoint(body: (n: number) => object, status = 200): { fetch: typeof fetch; calls: { url: string; authorization: string | undefined }[] } {
  const calls: { url: string; authorization: string | undefined }[] = [];
  const fake = (async (input: string | URL | Request, init?: RequestInit) => {
    const headers = new Headers(init?.headers);
    calls.push({ url: String(input), authorization: headers.get("authorization") ?? undefined });
    return new Response(JSON.stringify(body(calls.length)), { status, headers: { "content-type": "application/json" } });
  }) as typeof fetch;
  return { fetch: fake, calls };
}

const challenge = 'Bearer realm="https://auth.example/token",service="reg.example",scope="repository:team/app:pull"';

describe("RegistryAuth", () => {
  it("asks the realm with service and scope and Basic credentials, then caches the token until expiry", async () => {
    const clock = new FakeClock();
    const endpoint = tokenEndpoint((n) => ({ token: `t${n}`, expires_in: 120 }));
    const auth = new RegistryAuth({ clock, fetch: endpoint.fetch, credentials: () => ({ username: "u", password: "p" }) });
    assert.equal(await auth.headerFor("reg.example", "team/app"), undefined, "nothing is sent before the first challenge");
    assert.equal(await auth.answerChallenge("reg.example", "team/app", challenge), "Bearer t1");
    assert.equal(endpoint.calls[0]?.url, "https://auth.example/token?service=reg.example&scope=repository%3Ateam%2Fapp%3Apull");
    assert.equal(endpoint.calls[0]?.authorization, `Basic ${Buffer.from("u:p").toString("base64")}`);
    await clock.advance(100_000);
    assert.equal(await auth.headerFor("reg.example", "team/app"), "Bearer t1");
    await clock.advance(20_000);
    assert.equal(await auth.headerFor("reg.example", "team/app"), "Bearer t2", "refreshed shortly before expiry");
    assert.equal(await auth.headerFor("reg.example", "team/other"), "Bearer t3", "another repository is another scope");
  });

  it("makes one token request for callers that need the same scope at once", async () => {
    const clock = new FakeClock();
    const endpoint = tokenEndpoint((n) => ({ token: `t${n}`, expires_in: 120 }));
    const auth = new RegistryAuth({ clock, fetch: endpoint.fetch });
    await auth.answerChallenge("reg.example", "team/app", challenge);
    await clock.advance(200_000);
    const headers = await Promise.all([1, 2, 3].map(() => auth.headerFor("reg.example", "team/app")));
    assert.deepEqual(headers, ["Bearer t2", "Bearer t2", "Bearer t2"]);
    assert.equal(endpoint.calls.length, 2);
  });

  it("uses 60 s when the server names no lifetime, and access_token when token is absent", async () => {
    const clock = new FakeClock();
    const endpoint = tokenEndpoint((n) => ({ access_token: `a${n}` }));
    const auth = new RegistryAuth({ clock, fetch: endpoint.fetch });
    assert.equal(await auth.answerChallenge("reg.example", "team/app", challenge), "Bearer a1");
    assert.equal(endpoint.calls[0]?.authorization, undefined, "anonymous token request");
    await clock.advance(54_000);
    assert.equal(await auth.headerFor("reg.example", "team/app"), "Bearer a1");
    await clock.advance(2_000);
    assert.equal(await auth.headerFor("reg.example", "team/app"), "Bearer a2");
  });

  it("refuses a plain-HTTP realm for a remote registry (credentials would travel in clear)", async () => {
    const endpoint = tokenEndpoint(() => ({ token: "t" }));
    const auth = new RegistryAuth({ clock: new FakeClock(), fetch: endpoint.fetch, credentials: () => ({ username: "u", password: "p" }) });
    await assert.rejects(auth.answerChallenge("reg.example", "x", 'Bearer realm="http://auth.example/token"'), /token realm http:\/\/auth.example is not HTTPS/);
    assert.equal(endpoint.calls.length, 0);
  });

  it("answers Basic challenges only with credentials, and names the user when they are rejected", async () => {
    const none = new RegistryAuth({ clock: new FakeClock() });
    await assert.rejects(none.answerChallenge("reg.example", "x", 'Basic realm="r"'), { code: "AuthRequired" });
    const auth = new RegistryAuth({ clock: new FakeClock(), credentials: () => ({ username: "robot", password: "secret" }) });
    assert.equal(await auth.answerChallenge("reg.example", "x", 'Basic realm="r"'), `Basic ${Buffer.from("robot:secret").toString("base64")}`);
    assert.equal(await auth.headerFor("reg.example", "x"), `Basic ${Buffer.from("robot:secret").toString("base64")}`, "sent up front afterwards");
    const err = auth.rejected("reg.example", "x");
    assert.match(err.message, /rejected the credentials of user robot/);
    assert.doesNotMatch(err.message, /secret/);
  });

  it("turns token-server refusals and junk into clear errors", async () => {
    const refused = new RegistryAuth({ clock: new FakeClock(), fetch: tokenEndpoint(() => ({}), 401).fetch, credentials: () => ({ username: "u", password: "p" }) });
    await assert.rejects(refused.answerChallenge("reg.example", "x", challenge), { code: "Unauthorized", message: /credentials of user u rejected/ });
    const empty = new RegistryAuth({ clock: new FakeClock(), fetch: tokenEndpoint(() => ({ token: "" })).fetch });
    await assert.rejects(empty.answerChallenge("reg.example", "x", challenge), { code: "InvalidTokenResponse" });
    const unknown = new RegistryAuth({ clock: new FakeClock() });
    await assert.rejects(unknown.answerChallenge("reg.example", "x", 'Negotiate abc'), /without a usable Basic or Bearer challenge/);
  });
});
