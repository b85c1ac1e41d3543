/**
 * A runner pool's cache volume (docs/caches.md): the disk each of its job VMs gets as its own
 * copy-on-write clone of the pool's latest cache generation, mounted at `paths` before the runner
 * starts. The pool carries what a user chooses (size, paths); its VMs carry the same plus the
 * volume's identity, which the pool sets, so one pool's cache is never mounted for another.
 */
import { Type, type Static } from "@sinclair/typebox";
import { cel, celList, SIZE_PATTERN, StringEnum, Timestamp } from "./common.ts";

/**
 * An absolute guest path of plain segments. No `.` or `..` segment, no commas (the paths travel
 * comma-separated on the guest's kernel command line), nothing a shell or the kernel would read
 * differently.
 */
const CACHE_PATH_PATTERN = "^(/[A-Za-z0-9_.-]+)+$";
/** Kernel command lines are at most 2,048 bytes on x86: 8 paths of 128 leave room for the rest. */
const MAX_CACHE_PATHS = 8;
const MAX_CACHE_PATH_LENGTH = 128;
/** Directories a cache must never cover: the guest's own, or what every job writes from scratch. */
export const REFUSED_CACHE_PATHS: readonly string[] = ["/", "/proc", "/sys", "/dev", "/run", "/tmp", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/usr", "/boot", "/.imp"];

export const CachePaths = Type.Array(Type.String({ minLength: 2, maxLength: MAX_CACHE_PATH_LENGTH, pattern: CACHE_PATH_PATTERN }), {
  minItems: 1,
  maxItems: MAX_CACHE_PATHS,
  "x-kubernetes-list-type": "set",
  description:
    "Guest directories kept on the cache volume, e.g. `/var/lib/docker` (Docker's data root: layers and build cache), `/home/runner/.cache`, `/root/.npm`. Each is bind-mounted from the volume before the runner starts; a directory the image lacks is created, owned like its nearest existing parent.",
  ...cel(
    { rule: "self.all(p, !p.matches('(^|/)[.][.]?(/|$)'))", message: "a cache path has no . or .. segment" },
    { rule: `self.all(p, !(p in ${celList(REFUSED_CACHE_PATHS)}) && !p.startsWith('/.imp/') && !p.startsWith('/proc/') && !p.startsWith('/sys/') && !p.startsWith('/dev/'))`, message: `a cache path may not be one of ${REFUSED_CACHE_PATHS.join(", ")} or under /proc, /sys, /dev or /.imp` },
  ),
});

const CacheSize = Type.String({
  maxLength: 16,
  pattern: SIZE_PATTERN,
  description: "The volume's size, 64Mi to 1Ti, e.g. `20Gi`: each VM's clone is exactly this big (a job that fills it gets ENOSPC in its own clone, no other VM notices), sparse on the node. Changing it starts a new, empty cache.",
});

/** 64 MiB to 1 TiB, as the node's cache refuses anything else: said at the API, not at a VM's boot. */
const SIZE_RANGE = cel({
  rule: "self.size.endsWith('Mi') ? int(self.size.replace('Mi', '')) >= 64 && int(self.size.replace('Mi', '')) <= 1048576 : self.size.endsWith('Gi') ? int(self.size.replace('Gi', '')) <= 1024 : self.size == '1Ti'",
  message: "a cache volume is 64Mi to 1Ti",
  fieldPath: ".size",
});

export const PoolCacheSettings = Type.Object(
  { size: CacheSize, paths: CachePaths },
  { description: "A cache volume for the pool's VMs (QEMU nodes; a VM started from a memory snapshot boots instead while it has one). See docs/caches.md.", ...SIZE_RANGE },
);
export type PoolCacheSettings = Static<typeof PoolCacheSettings>;

export const VmCacheVolume = Type.Object(
  {
    volume: Type.String({
      minLength: 1,
      maxLength: 63,
      pattern: "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
      description: "Which cache volume of the VM's namespace: a runner pool sets its own UID, so a pool recreated under the same name starts with an empty cache.",
    }),
    size: CacheSize,
    paths: CachePaths,
  },
  { ...SIZE_RANGE, description: "The VM's cache volume: a clone of the volume's latest generation on its node, mounted at `paths` before the workload starts. Set by runner pools from their `spec.cache`. See docs/caches.md." },
);
export type VmCacheVolume = Static<typeof VmCacheVolume>;

export const CACHE_DECISIONS = ["Promote", "Discard"] as const;
export type CacheDecision = (typeof CACHE_DECISIONS)[number];

/**
 * What became of a VM's cache clone after its job. The operator writes `promotion` from what the
 * forge says of the job (never from the VM); the node's agent, holding the clone, carries it out
 * and writes `result`.
 */
export const VmCacheStatus = Type.Object(
  {
    promotion: Type.Optional(
      Type.Object(
        {
          decision: StringEnum(CACHE_DECISIONS, { description: "`Promote`: the clone becomes the volume's next generation on the VM's node; `Discard`: it is deleted." }),
          reason: Type.String({ maxLength: 128, pattern: "^[A-Za-z][A-Za-z0-9]*$", description: "Why, e.g. Trusted, NotSucceeded, UntrustedEvent, FromFork, FactsUnknown." }),
          jobCompletedAt: Type.Optional(Timestamp("When the job completed, as the forge says: a promoted generation is ordered by it, so of two trusted jobs the later-completed one's cache is the newest.")),
        },
        {
          description: "The operator's decision on the VM's clone, written once after the job ended.",
          ...cel(
            { rule: "self == oldSelf", message: "a cache decision is written once" },
            { rule: "self.decision != 'Promote' || has(self.jobCompletedAt)", message: "a promotion names when its job completed", fieldPath: ".jobCompletedAt", reason: "FieldValueRequired" },
          ),
        },
      ),
    ),
    result: Type.Optional(StringEnum(["Promoted", "Discarded"] as const, { description: "What the node's agent did with the clone." })),
    generation: Type.Optional(Type.String({ maxLength: 63, pattern: "^[a-z0-9-]+$", description: "The generation the clone became (result Promoted)." })),
  },
  { description: "The VM's cache clone after its job (docs/caches.md)." },
);
export type VmCacheStatus = Static<typeof VmCacheStatus>;
