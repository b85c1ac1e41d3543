import { KubeConfig } from "@kubernetes/client-node";
import { terminalError } from "../../shared/index.ts";

/** Parsers for command-line values shared by the commands, so each refuses bad input the same way. */

export const port = (value: string, flag: string): number => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw terminalError("InvalidFlag", `Cannot use ${flag} ${value}: not a port number`);
  return n;
};

export const seconds = (value: string, flag: string): number => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 86_400) throw terminalError("InvalidFlag", `Cannot use ${flag} ${value}: need whole seconds, 1 to 86400`);
  return n;
};

/** `--kubeconfig` if given, else $KUBECONFIG, ~/.kube/config or the Pod's in-cluster account. */
export function loadKubeConfig(path: string | undefined): KubeConfig {
  const kubeConfig = new KubeConfig();
  if (path !== undefined) kubeConfig.loadFromFile(path);
  else kubeConfig.loadFromDefault();
  return kubeConfig;
}
