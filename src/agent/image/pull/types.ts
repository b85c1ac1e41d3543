/**
 * Public shapes of the image pull side. The image build side consumes `PulledImage` and a
 * `ContentStore`; everything else in this folder is internal.
 */
import type { ContentStore } from "../store/content-store.ts";

/** A content descriptor as it appears in manifests: the blob's digest, exact size and media type. */
export interface Descriptor {
  readonly mediaType: string;
  /** `sha256:<64 hex>`; other algorithms are rejected before anything is fetched. */
  readonly digest: string;
  readonly size: number;
  readonly annotations?: Readonly<Record<string, string>>;
}

/** A platform as written in an image index (`os`, `architecture`, optional `variant`). */
export interface Platform {
  readonly os: string;
  readonly architecture: string;
  readonly variant?: string;
}

/** The parsed image config (only the fields Imp reads are typed; the full JSON blob is in the store). */
export interface ImageConfig {
  readonly architecture?: string;
  readonly os?: string;
  readonly config?: {
    readonly Env?: readonly string[];
    readonly Entrypoint?: readonly string[] | null;
    readonly Cmd?: readonly string[] | null;
    readonly WorkingDir?: string;
    readonly User?: string;
  };
  readonly rootfs?: { readonly type: string; readonly diff_ids: readonly string[] };
}

/** A layer of a pulled image. Its blob is in the content store, verified (digest and size). */
export interface PulledLayer {
  readonly digest: string;
  readonly size: number;
  /** e.g. `application/vnd.oci.image.layer.v1.tar+gzip`, `...tar+zstd`, or the Docker v2 `...diff.tar.gzip`. */
  readonly mediaType: string;
}

/** The result of a pull: every blob named here is in the store and was verified while it was written. */
export interface PulledImage {
  /** The reference as the caller gave it, normalised (`host/repo:tag` or `host/repo@sha256:...`). */
  readonly reference: string;
  /** Digest of the image manifest for this platform (not of the index, when there was one). */
  readonly manifestDigest: string;
  /** Digest of the index the platform manifest was picked from, when the reference named an index. */
  readonly indexDigest?: string;
  readonly platform: Platform;
  readonly configDigest: string;
  readonly config: ImageConfig;
  /** In application order (lowest layer first). */
  readonly layers: readonly PulledLayer[];
}

/** Username/password for one registry host; used for basic auth and to obtain bearer tokens. */
export interface RegistryCredentials {
  readonly username: string;
  readonly password: string;
}

/** Looks up credentials for a registry host (`host` or `host:port`); undefined means anonymous. */
export type CredentialLookup = (registryHost: string) => RegistryCredentials | undefined;

/** Progress of one pull, for bars and logs. Byte counts are of the compressed blob as fetched. */
export type PullProgress =
  | { readonly kind: "resolved"; readonly reference: string; readonly manifestDigest: string; readonly layers: readonly PulledLayer[] }
  | { readonly kind: "layer-start"; readonly digest: string; readonly size: number }
  | { readonly kind: "layer-bytes"; readonly digest: string; readonly received: number; readonly size: number }
  | { readonly kind: "layer-cached"; readonly digest: string; readonly size: number }
  | { readonly kind: "layer-done"; readonly digest: string; readonly size: number }
  | { readonly kind: "retry"; readonly what: string; readonly attempt: number; readonly delayMs: number; readonly error: string };

export interface PullOptions {
  readonly store: ContentStore;
  /** The node's platform; default: this process's (`linux`, `amd64`/`arm64`...). */
  readonly platform?: Platform;
  readonly auth?: CredentialLookup;
  /** Layers fetched at once; default 3. */
  readonly concurrency?: number;
  readonly signal?: AbortSignal;
  readonly onProgress?: (event: PullProgress) => void;
}
