import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { credentialsFromDockerConfig, credentialsFromSecretData, firstCredentials, normaliseRegistryKey } from "./docker-config.ts";

describe("dockerconfigjson credentials", () => {
  const config = JSON.stringify({
    auths: {
      "https://reg.example/v1/": { auth: Buffer.from("robot:pa:ss").toString("base64") },
      "mirror.local:5000": { username: "u", password: "p" },
      "empty.example": {},
    },
  });

  it("reads auth (base64 user:pass, password may contain ':') and username/password entries", () => {
    const lookup = credentialsFromDockerConfig(config);
    assert.deepEqual(lookup("reg.example"), { username: "robot", password: "pa:ss" });
    assert.deepEqual(lookup("mirror.local:5000"), { username: "u", password: "p" });
    assert.equal(lookup("empty.example"), undefined);
    assert.equal(lookup("other.example"), undefined);
  });

  it("reads the base64 .dockerconfigjson of a Secret's data", () => {
    const lookup = credentialsFromSecretData({ ".dockerconfigjson": Buffer.from(config).toString("base64") });
    assert.deepEqual(lookup("REG.example"), { username: "robot", password: "pa:ss" });
  });

  it("rejects Secrets of the wrong shape with actionable messages", () => {
    assert.throws(() => credentialsFromSecretData({ ".dockercfg": "e30=" }), /no .dockerconfigjson key/);
    assert.throws(() => credentialsFromSecretData({ ".dockerconfigjson": Buffer.from("not json").toString("base64") }), /not JSON/);
    assert.throws(() => credentialsFromDockerConfig("{}"), /no auths object/);
  });

  it("normalises registry keys", () => {
    assert.equal(normaliseRegistryKey("https://Reg.Example:443/v2/"), "reg.example:443");
    assert.equal(normaliseRegistryKey("reg.example"), "reg.example");
  });

  it("combines lookups, first match wins", () => {
    const a = credentialsFromDockerConfig(JSON.stringify({ auths: { x: { username: "a", password: "1" } } }));
    const b = credentialsFromDockerConfig(JSON.stringify({ auths: { x: { username: "b", password: "2" }, y: { username: "c", password: "3" } } }));
    const both = firstCredentials(a, b);
    assert.equal(both("x")?.username, "a");
    assert.equal(both("y")?.username, "c");
  });
});
