import type { Command } from "commander";
import { registerImageBuild, registerImageGc } from "./image/build.ts";
import { registerImageLs } from "./image/ls.ts";
import { registerImagePull } from "./image/pull.ts";
import { registerImageRm } from "./image/rm.ts";

/**
 * `imp image ...`: OCI images in this node's content store, usable without Kubernetes. Each subcommand
 * lives in its own file under ./image and registers itself here with one line.
 */
export function registerImage(program: Command): void {
  const image = program.command("image").description("OCI images on this node: pull, list, remove (no Kubernetes needed)");
  registerImagePull(image);
  registerImageLs(image);
  registerImageRm(image);
  registerImageBuild(image);
  registerImageGc(image);
}
