/** `imp image pull REF`: pulls an image into the node's content store with a progress bar per layer. */
import { readFile } from "node:fs/promises";
import type { Command } from "commander";
import type { CredentialLookup, Platform } from "../../../agent/index.ts";
import { parse as parseYaml } from "yaml";
import { credentialsFromDockerConfig, credentialsFromSecretData, formatPlatform, FsContentStore, ImagePuller, nodePlatform } from "../../../agent/index.ts";
import { humanBytes, storeDir, withStoreOption } from "./common.ts";
import { progressView } from "./pull-progress.ts";

interface PullOpts {
  store?: string;
  platform?: string;
  concurrency: string;
  authFile?: string;
  plainHttp?: boolean;
  defaultRegistry?: string;
  quiet?: boolean;
}

export function registerImagePull(image: Command): void {
  withStoreOption(image.command("pull"))
    .argument("<reference>", "image reference: host[:port]/repository[:tag][@sha256:...]")
    .description("pull an image (config and layers, verified) into the content store")
    .option("--platform <os/arch[/variant]>", "platform to pick from an index (default: this machine's)")
    .option("--concurrency <n>", "layers fetched at once", "3")
    .option("--auth-file <path>", "registry credentials: a Docker config.json, or a kubernetes.io/dockerconfigjson Secret as kubectl prints it (YAML or JSON); default $IMP_AUTH_FILE")
    .option("--plain-http", "speak plain HTTP to this registry (loopback registries always do)")
    .option("--default-registry <host>", "registry for references that name none (default $IMP_DEFAULT_REGISTRY)")
    .option("-q, --quiet", "print only the manifest digest")
    .action(async (reference: string, opts: PullOpts) => {
      const store = await FsContentStore.open(storeDir(opts));
      const platform = opts.platform === undefined ? nodePlatform() : parsePlatform(opts.platform);
      const concurrency = Number(opts.concurrency);
      if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 32) throw new Error(`Cannot pull ${reference}: --concurrency must be 1..32`);
      const authFile = opts.authFile ?? process.env.IMP_AUTH_FILE;
      const credentials = authFile === undefined ? undefined : readCredentials(await readFile(authFile, "utf8"));
      const defaultRegistry = opts.defaultRegistry ?? process.env.IMP_DEFAULT_REGISTRY;
      const puller = new ImagePuller({
        ...(credentials === undefined ? {} : { credentials }),
        ...(defaultRegistry === undefined ? {} : { defaultRegistry }),
        ...(opts.plainHttp === true ? { plainHttp: () => true } : {}),
      });
      const controller = new AbortController();
      const onSignal = (): void => controller.abort(new Error("interrupted"));
      process.once("SIGINT", onSignal);
      process.once("SIGTERM", onSignal);
      const view = opts.quiet === true ? undefined : progressView(process.stderr.isTTY === true);
      const started = Date.now();
      try {
        const pulled = await puller.pull(reference, { store, platform, concurrency, signal: controller.signal, ...(view === undefined ? {} : { onProgress: view.onProgress }) });
        view?.stop();
        const total = pulled.layers.reduce((sum, l) => sum + l.size, 0);
        if (opts.quiet === true) {
          process.stdout.write(`${pulled.manifestDigest}\n`);
          return;
        }
        const seconds = (Date.now() - started) / 1000;
        process.stdout.write(
          `${pulled.reference}\n  digest    ${pulled.manifestDigest}\n  platform  ${formatPlatform(pulled.platform)}\n` +
            `  layers    ${pulled.layers.length} (${humanBytes(total)}), fetched ${humanBytes(view?.fetchedBytes() ?? 0)} in ${seconds.toFixed(1)} s\n`,
        );
      } finally {
        view?.stop();
        process.off("SIGINT", onSignal);
        process.off("SIGTERM", onSignal);
      }
    });
}

/**
 * `--auth-file` takes a Docker config.json, or a `kubernetes.io/dockerconfigjson` Secret as
 * `kubectl get secret NAME -o yaml|json` prints it.
 */
function readCredentials(text: string): CredentialLookup {
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch {
    doc = undefined;
  }
  const secret = doc as { kind?: unknown; data?: unknown } | undefined;
  if (secret?.kind === "Secret" && typeof secret.data === "object" && secret.data !== null) {
    return credentialsFromSecretData(secret.data as Record<string, string>);
  }
  return credentialsFromDockerConfig(text);
}

function parsePlatform(text: string): Platform {
  const [os, architecture, variant, extra] = text.split("/");
  if (os === undefined || os === "" || architecture === undefined || architecture === "" || extra !== undefined) {
    throw new Error(`Cannot use platform ${JSON.stringify(text)}: write os/arch or os/arch/variant`);
  }
  return { os, architecture, ...(variant === undefined || variant === "" ? {} : { variant }) };
}
