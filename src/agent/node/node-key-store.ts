/**
 * The node's setup key: an X25519 key pair whose public half the agent publishes in ImpNode status
 * and whose private half opens the runner setups the operator sealed to this node. The private key
 * lives only in the agent's state directory (mode 0600, written atomically) and in memory; it is
 * never sent to the API.
 */
import { chmod, mkdir, open, readFile, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { generateNodeKeyPair, nodeKeyPairFromPrivate, type NodeKeyPair } from "../../api/index.ts";
import { terminalError } from "../../shared/index.ts";

export const NODE_KEY_FILE = "setup-key";

/** Loads the key from `stateDir`, or creates and stores one. Refuses a key file others can read. */
export async function loadOrCreateNodeKey(stateDir: string): Promise<NodeKeyPair> {
  const path = join(stateDir, NODE_KEY_FILE);
  const info = await stat(path).catch((err: NodeJS.ErrnoException) => {
    if (err.code === "ENOENT") return undefined;
    throw err;
  });
  if (info !== undefined) {
    if ((info.mode & 0o077) !== 0) {
      throw terminalError("SetupKeyExposed", `Cannot use the node's setup key ${path}: its mode is ${(info.mode & 0o777).toString(8)}, readable by others; make it 0600 or delete it to make a new one`);
    }
    return nodeKeyPairFromPrivate(new Uint8Array(await readFile(path)));
  }
  const pair = await generateNodeKeyPair();
  await mkdir(stateDir, { recursive: true, mode: 0o700 });
  const tmp = `${path}.tmp-${process.pid}`;
  const handle = await open(tmp, "wx", 0o600);
  try {
    await handle.writeFile(pair.privateKey);
    await handle.sync();
  } finally {
    await handle.close();
  }
  await chmod(tmp, 0o600);
  try {
    await rename(tmp, path);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
  return pair;
}
