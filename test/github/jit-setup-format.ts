/**
 * The test server's encoded jitconfig, read by guest/cmd/imp-test-runner. It has the outer shape
 * of the real one (base64 of a JSON object whose values are the base64 contents of the runner's
 * `.runner` and `.credentials` files); the credential is a one-time secret instead of the real
 * runner's OAuth client and RSA key, since the test server speaks a minimal session API, not the
 * Actions service protocol.
 */
export interface RunnerFile {
  readonly AgentId: number;
  readonly AgentName: string;
  readonly PoolId: number;
  readonly PoolName: string;
  /** Base URL of the test server's runner session API. */
  readonly ServerUrl: string;
  readonly GitHubUrl: string;
  readonly WorkFolder: string;
  readonly Ephemeral: true;
  readonly DisableUpdate: true;
}

export interface CredentialsFile {
  readonly Scheme: "ImpTestOneTimeSecret";
  readonly Data: { readonly secret: string };
}

const b64 = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString("base64");

export function encodeJitSetup(runner: RunnerFile, credentials: CredentialsFile): string {
  return b64({ ".runner": b64(runner), ".credentials": b64(credentials) });
}

export function decodeJitSetup(encoded: string): { runner: RunnerFile; credentials: CredentialsFile } {
  const outer = JSON.parse(Buffer.from(encoded, "base64").toString("utf8")) as Record<string, string>;
  const inner = (key: string): unknown => JSON.parse(Buffer.from(outer[key] ?? "", "base64").toString("utf8"));
  return { runner: inner(".runner") as RunnerFile, credentials: inner(".credentials") as CredentialsFile };
}
