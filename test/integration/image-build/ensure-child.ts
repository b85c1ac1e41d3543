/**
 * Child process for the cross-process single-flight test: ensures one key whose producer records
 * each run in `<counter>` and takes a while. Args: cacheRoot key counterFile [crash]. With `crash`
 * the process kills itself in the middle of the build.
 */
import { appendFile, writeFile } from "node:fs/promises";
import { setTimeout as sleep } from "node:timers/promises";
import { ImageCache } from "../../../src/agent/image/cache/index.ts";

const [root, key, counter, crash] = process.argv.slice(2);
if (root === undefined || key === undefined || counter === undefined) throw new Error("usage: ensure-child.ts root key counter [crash]");
const cache = await ImageCache.open({ root, maxBytes: 1024 ** 3 });
const result = await cache.ensure(key, async ({ output }) => {
  await appendFile(counter, `${process.pid}\n`);
  await writeFile(output, "half");
  if (crash === "crash") process.kill(process.pid, "SIGKILL");
  await sleep(400);
  await writeFile(output, `image of ${key}`);
  return { by: process.pid };
});
process.stdout.write(JSON.stringify({ built: result.built, path: result.path }));
