/** Picking the node's platform out of an image index: pure functions, table-tested. */
import { terminalError } from "../../../shared/index.ts";
import type { IndexEntry } from "./media-types.ts";
import type { Platform } from "./types.ts";

const NODE_ARCH: Readonly<Record<string, string>> = {
  x64: "amd64", arm64: "arm64", arm: "arm", ia32: "386", ppc64: "ppc64le", s390x: "s390x", riscv64: "riscv64", loong64: "loong64",
};

/** The platform of this process's machine in OCI terms. */
export function nodePlatform(): Platform {
  return { os: process.platform === "linux" ? "linux" : process.platform, architecture: NODE_ARCH[process.arch] ?? process.arch };
}

export const formatPlatform = (p: Platform): string => `${p.os}/${p.architecture}${p.variant === undefined ? "" : `/${p.variant}`}`;

// arm64 images are published with variant "v8" or none; both run on any arm64 node.
const variantMatches = (wanted: Platform, offered: Platform): boolean => {
  if (wanted.variant === undefined) return true;
  if (offered.variant === wanted.variant) return true;
  return wanted.architecture === "arm64" && offered.variant === undefined && wanted.variant === "v8";
};

/**
 * The index entry to use for `wanted`: same os and architecture, variant compatible; an exact variant
 * beats a missing one. Throws a terminal `NoMatchingPlatform` error listing what the index offers.
 */
export function selectPlatform(entries: readonly IndexEntry[], wanted: Platform, what: string): IndexEntry & { platform: Platform } {
  const candidates = entries.filter(
    (e): e is IndexEntry & { platform: Platform } =>
      e.platform !== undefined && e.platform.os === wanted.os && e.platform.architecture === wanted.architecture && variantMatches(wanted, e.platform),
  );
  const exact = candidates.find((e) => e.platform.variant === wanted.variant);
  const chosen = exact ?? candidates[0];
  if (chosen !== undefined) return chosen;
  const offered = [...new Set(entries.filter((e) => e.platform !== undefined && e.platform.os !== "unknown").map((e) => formatPlatform(e.platform as Platform)))];
  throw terminalError(
    "NoMatchingPlatform",
    `Cannot pull ${what}: the index has no image for platform ${formatPlatform(wanted)}; it offers ${offered.length === 0 ? "no platforms" : offered.join(", ")}`,
    { context: { wanted: formatPlatform(wanted), offered: offered.join(",") } },
  );
}
