/**
 * Inside the node agent, the folders are layers: the control loop (node/) uses the VM lifecycle
 * (vm/) and the machine (host/), which use the drivers (vmm/), the guest protocol (guest/) and
 * images (image/) — never the other way. eslint holds the parts of src/ to each other's index.ts;
 * this holds the agent's own layers, so a driver or a fake never reaches up into the lifecycle.
 */
import assert from "node:assert/strict";
import { readdir, readFile } from "node:fs/promises";
import { dirname, join, relative, resolve } from "node:path";
import { describe, it } from "node:test";

const agent = resolve(import.meta.dirname, "../../src/agent");

/** Folder → the agent folders it must never import. */
const FORBIDDEN: Readonly<Record<string, readonly string[]>> = {
  vmm: ["vm", "node", "host"],
  guest: ["vm", "node", "host", "vmm"],
  image: ["vm", "node", "host", "vmm"],
  vsock: ["vm", "node", "host", "vmm"],
  supervisor: ["vm", "node", "host"],
  network: ["vm", "node", "host"],
  snapshot: ["vm", "node", "host", "vmm"],
  cache: ["vm", "node", "host", "vmm", "snapshot"],
  vm: ["node", "host"],
  host: ["node", "vm"],
};

async function sources(dir: string): Promise<string[]> {
  const found: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile() && entry.name.endsWith(".ts") && !entry.name.endsWith(".test.ts")) found.push(join(entry.parentPath, entry.name));
  }
  return found;
}

describe("the node agent's layers", () => {
  it("no lower folder imports a higher one (vmm/ never reaches vm/, vm/ never node/, …)", async () => {
    const breaches: string[] = [];
    for (const [folder, forbidden] of Object.entries(FORBIDDEN)) {
      for (const file of await sources(join(agent, folder))) {
        const text = await readFile(file, "utf8");
        for (const m of text.matchAll(/from "(\.[^"]+)"/g)) {
          const target = relative(agent, resolve(dirname(file), m[1] ?? "")).split("/")[0] ?? "";
          if (forbidden.includes(target)) breaches.push(`src/agent/${relative(agent, file)} imports ${m[1]}`);
        }
      }
    }
    assert.deepEqual(breaches, []);
  });
});
