import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";

/** `sha256:<hex>` of a file's bytes. */
export async function fileDigestOf(path: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return `sha256:${hash.digest("hex")}`;
}
