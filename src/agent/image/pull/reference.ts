/**
 * Image references: `host[:port]/path[:tag][@sha256:...]`. Imp names no default registry in code: a
 * reference without a registry host is completed with the caller's `defaultRegistry` (from agent
 * config or `$IMP_DEFAULT_REGISTRY`) or rejected, so an image never comes from a host nobody chose.
 */
import { terminalError } from "../../../shared/index.ts";
import { sha256Hex } from "../store/index.ts";

export interface ImageReference {
  /** `host` or `host:port`, as used in URLs and credential lookup. */
  readonly registry: string;
  /** Repository path inside the registry, e.g. `team/app`. */
  readonly repository: string;
  readonly tag?: string;
  readonly digest?: string;
}

const PATH_COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const TAG = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/;
const HOST = /^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?$/;
const MAX_REFERENCE = 512;

/** Parses and validates a reference. Throws a terminal `InvalidReference` error saying what is wrong. */
export function parseReference(input: string, defaultRegistry?: string): ImageReference {
  const invalid = (why: string): Error =>
    terminalError("InvalidReference", `Cannot parse image reference ${JSON.stringify(input.slice(0, 100))}: ${why}`);
  if (input.length === 0 || input.length > MAX_REFERENCE) throw invalid(`length must be 1..${MAX_REFERENCE}`);
  let rest = input;
  let digest: string | undefined;
  const at = rest.indexOf("@");
  if (at >= 0) {
    digest = rest.slice(at + 1);
    sha256Hex(digest);
    rest = rest.slice(0, at);
  }
  let tag: string | undefined;
  const lastColon = rest.lastIndexOf(":");
  if (lastColon > rest.lastIndexOf("/")) {
    tag = rest.slice(lastColon + 1);
    rest = rest.slice(0, lastColon);
    if (!TAG.test(tag)) throw invalid(`tag ${JSON.stringify(tag)} is not valid`);
  }
  const slash = rest.indexOf("/");
  const first = slash < 0 ? "" : rest.slice(0, slash);
  let registry: string;
  let repository: string;
  // Like Docker: the first component is a host when it has a dot or a port, or is localhost.
  if (first !== "" && (first.includes(".") || first.includes(":") || first === "localhost" || first.startsWith("["))) {
    registry = first;
    repository = rest.slice(slash + 1);
  } else if (defaultRegistry !== undefined && defaultRegistry !== "") {
    registry = defaultRegistry;
    repository = rest;
  } else {
    throw invalid("it names no registry host (write host/repository:tag, or configure a default registry)");
  }
  if (!HOST.test(registry)) throw invalid(`registry ${JSON.stringify(registry)} is not a host[:port]`);
  if (repository === "" || !repository.split("/").every((c) => PATH_COMPONENT.test(c))) {
    throw invalid(`repository ${JSON.stringify(repository)} must be lowercase path components`);
  }
  if (tag === undefined && digest === undefined) tag = "latest";
  return { registry, repository, ...(tag === undefined ? {} : { tag }), ...(digest === undefined ? {} : { digest }) };
}

/** The canonical text of a reference: `host/repo:tag`, `host/repo@digest` or `host/repo:tag@digest`. */
export function formatReference(ref: ImageReference): string {
  return `${ref.registry}/${ref.repository}${ref.tag === undefined ? "" : `:${ref.tag}`}${ref.digest === undefined ? "" : `@${ref.digest}`}`;
}
