/**
 * ImpVMRunnerPool (namespaced): keeps CI runners (GitHub Actions, or Gitea Actions) available as
 * ImpVMs — `minIdle` idle runners, never more than `maxConcurrent` VMs — each registered just in
 * time with a one-time setup.
 */
import { Type, type Static } from "@sinclair/typebox";
import { IMP_VM_RUNNER_POOL, MAX_POOL_NAME_LENGTH } from "../constants.ts";
import { cel, Conditions, DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN, DURATION_PATTERN, EnvList, objectRef, SecretKeySelector, StringEnum } from "./common.ts";
import { SETUP_DELIVERIES } from "./impvm.ts";
import { PoolCacheSettings } from "./cache.ts";
import { AGE_COLUMN, type ImpObject, type KindDefinition } from "./kind.ts";

/** Where runners are registered: one repository, an organization, or an enterprise. */
export const GITHUB_SCOPES = ["repo", "org", "enterprise"] as const;
export type GitHubScope = (typeof GITHUB_SCOPES)[number];

const GITHUB_NAME = "^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?$";

/** GitHub's runner scale set: jobs reach the pool through its message queue, no webhook needed. */
export const ScaleSetSettings = Type.Object(
  {
    name: Type.String({
      minLength: 1,
      maxLength: 45,
      pattern: "^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$",
      description: "The scale set's name, unique in its runner group; workflows select the pool with `runs-on: <name>`. Created if missing, deleted with the pool.",
    }),
  },
  { description: "Scale-set mode: the operator keeps one message session on this runner scale set, acquires its jobs and scales on its assigned-job count (docs/operator.md)." },
);
export type ScaleSetSettings = Static<typeof ScaleSetSettings>;

export const GitHubSettings = Type.Object(
  {
    credentialsSecretRef: objectRef(
      "Secret with keys `appId`, `installationId` and `privateKey` (PEM) of the GitHub App, or a key `token` instead (required for scope `enterprise`, whose runner endpoints refuse Apps). Read only by the operator.",
    ),
    apiURL: Type.String({
      maxLength: 256,
      pattern: "^https?://[^\\s/]+(/[^\\s]*)?$",
      default: "https://api.github.com",
      description: "GitHub REST API base URL (GitHub Enterprise Server: `https://<host>/api/v3`).",
    }),
    scope: StringEnum(GITHUB_SCOPES, { description: "Register runners for a repository, an organization or an enterprise." }),
    repository: Type.Optional(
      Type.String({ maxLength: 140, pattern: "^[A-Za-z0-9-]+/[A-Za-z0-9._-]+$", description: "`owner/name`; required for scope `repo`." }),
    ),
    organization: Type.Optional(Type.String({ maxLength: 39, pattern: GITHUB_NAME, description: "Organization login; required for scope `org`." })),
    enterprise: Type.Optional(Type.String({ maxLength: 100, pattern: GITHUB_NAME, description: "Enterprise slug; required for scope `enterprise`." })),
    runnerGroup: Type.String({ minLength: 1, maxLength: 128, default: "Default", description: "Runner group (org and enterprise scopes)." }),
    labels: Type.Array(Type.String({ minLength: 1, maxLength: 256, pattern: "^[^,\\s]+$" }), {
      minItems: 1,
      maxItems: 32,
      description: "Labels the runners carry; workflows select them with `runs-on`. In scale-set mode, extra labels of the scale set besides its name.",
      "x-kubernetes-list-type": "set",
    }),
    scaleSet: Type.Optional(ScaleSetSettings),
  },
  {
    description: "GitHub App credentials and where runners register.",
    ...cel(
      { rule: "self.scope != 'repo' || has(self.repository)", message: "repository is required when scope is repo", fieldPath: ".repository", reason: "FieldValueRequired" },
      { rule: "self.scope != 'org' || has(self.organization)", message: "organization is required when scope is org", fieldPath: ".organization", reason: "FieldValueRequired" },
      { rule: "self.scope != 'enterprise' || has(self.enterprise)", message: "enterprise is required when scope is enterprise", fieldPath: ".enterprise", reason: "FieldValueRequired" },
      {
        rule: "[has(self.repository), has(self.organization), has(self.enterprise)].filter(x, x).size() <= 1",
        message: "set only the one of repository, organization, enterprise that matches scope",
        fieldPath: ".scope",
      },
    ),
  },
);
export type GitHubSettings = Static<typeof GitHubSettings>;

/** Where Gitea runners register: one repository or an organization. */
export const GITEA_SCOPES = ["repo", "org"] as const;

export const GiteaSettings = Type.Object(
  {
    url: Type.String({
      maxLength: 256,
      pattern: "^https?://[^\\s/]+(/[^\\s]*)?$",
      description: "Gitea's root URL (its ROOT_URL), reachable from the operator and from the VMs: runners speak to it.",
    }),
    credentialsSecretRef: objectRef("Secret with key `token`: a Gitea access token of a user who administers the scope (scopes write:repository or write:organization). Read only by the operator."),
    scope: StringEnum(GITEA_SCOPES, { description: "Register runners for a repository or an organization." }),
    repository: Type.Optional(Type.String({ maxLength: 200, pattern: "^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$", description: "`owner/name`; required for scope `repo`." })),
    organization: Type.Optional(Type.String({ maxLength: 100, pattern: "^[A-Za-z0-9_.-]+$", description: "Organization name; required for scope `org`." })),
    labels: Type.Array(Type.String({ minLength: 1, maxLength: 256, pattern: "^[^,:\\s]+$" }), {
      minItems: 1,
      maxItems: 32,
      description: "Labels the runners carry (host mode: steps run in the VM itself); workflows select them with `runs-on`.",
      "x-kubernetes-list-type": "set",
    }),
  },
  {
    description: "Gitea Actions: where runners register. The one-time setup is a runner's `.runner` file, registered just in time.",
    ...cel(
      { rule: "self.scope != 'repo' || has(self.repository)", message: "repository is required when scope is repo", fieldPath: ".repository", reason: "FieldValueRequired" },
      { rule: "self.scope != 'org' || has(self.organization)", message: "organization is required when scope is org", fieldPath: ".organization", reason: "FieldValueRequired" },
      { rule: "!(has(self.repository) && has(self.organization))", message: "set only the one of repository, organization that matches scope", fieldPath: ".scope" },
    ),
  },
);
export type GiteaSettings = Static<typeof GiteaSettings>;

export const WebhookSettings = Type.Object(
  {
    enabled: Type.Boolean({ default: false, description: "Scale up on the forge's `workflow_job` webhooks (GitHub: `/webhooks/github`; Gitea 1.24+: `/webhooks/gitea`), with a listing of the forge's queue every 30 s as the backstop for lost deliveries." }),
    secretRef: Type.Optional(Type.Object(SecretKeySelector.properties, { description: "Secret key holding the webhook secret (HMAC SHA-256); read again at most every 10 s." })),
    previousSecretRef: Type.Optional(
      Type.Object(SecretKeySelector.properties, {
        description: "While rotating: the secret being replaced, accepted beside `secretRef`'s until this field is removed (set it to the old key, change the secret on the forge, then drop it).",
      }),
    ),
  },
  {
    description: "Webhook delivery for faster scale-up (GitHub or Gitea; a Gitea delivery is accepted only with the pool's own secret).",
    ...cel(
      { rule: "!self.enabled || has(self.secretRef)", message: "secretRef is required when the webhook is enabled", fieldPath: ".secretRef", reason: "FieldValueRequired" },
      { rule: "!has(self.previousSecretRef) || has(self.secretRef)", message: "previousSecretRef is only accepted beside secretRef", fieldPath: ".previousSecretRef", reason: "FieldValueRequired" },
    ),
  },
);
export type WebhookSettings = Static<typeof WebhookSettings>;

export const ImpVMRunnerPoolSpec = Type.Object(
  {
    templateName: Type.String({ minLength: 1, maxLength: 253, pattern: DNS_SUBDOMAIN_PATTERN, description: "ImpVMTemplate in the pool's namespace." }),
    github: Type.Optional(GitHubSettings),
    gitea: Type.Optional(GiteaSettings),
    minIdle: Type.Integer({ minimum: 0, maximum: 1000, default: 0, description: "Idle runners kept ready." }),
    maxConcurrent: Type.Integer({ minimum: 1, maximum: 1000, default: 10, description: "Upper bound on the pool's non-terminal VMs." }),
    scaleUpStep: Type.Integer({ minimum: 1, maximum: 100, default: 5, description: "Most VMs created in one reconcile." }),
    drainGracePeriod: Type.Optional(Type.String({
      minLength: 2,
      maxLength: 24,
      pattern: DURATION_PATTERN,
      default: "1h",
      description:
        "How long a job already running on a node that is drained (kubectl cordon/drain, or ImpNode spec.unschedulable) may keep running; then its VM is stopped. Idle runners there are replaced at once.",
    })),
    webhook: Type.Optional(WebhookSettings),
    cache: Type.Optional(PoolCacheSettings),
    runnerCommand: Type.Array(Type.String({ minLength: 1, maxLength: 4096 }), {
      minItems: 1,
      maxItems: 32,
      description: "Runner start command in the guest; the one-time setup arrives in its environment as IMP_RUNNER_JITCONFIG.",
    }),
    runnerEnv: Type.Optional(EnvList),
    runnerSetupDelivery: Type.Optional(
      StringEnum(SETUP_DELIVERIES, {
        default: "Environment",
        description: "How each runner receives its one-time setup: `Environment` (what GitHub's runner reads) or `Stdin` (read once, in no environment; for runners that support it). Copied to the pool's VMs.",
      }),
    ),
  },
  {
    description: "Desired runner pool.",
    ...cel(
      { rule: "self.maxConcurrent >= self.minIdle", message: "maxConcurrent must be at least minIdle", fieldPath: ".maxConcurrent" },
      { rule: "has(self.github) != has(self.gitea)", message: "exactly one forge: set github or gitea", fieldPath: ".github", reason: "FieldValueRequired" },
      {
        rule: "!has(self.github) || !has(self.github.scaleSet) || !has(self.webhook) || !self.webhook.enabled",
        message: "a scale-set pool takes its demand from its listener: webhook.enabled must be false",
        fieldPath: ".webhook.enabled",
      },
    ),
  },
);
export type ImpVMRunnerPoolSpec = Static<typeof ImpVMRunnerPoolSpec>;

const Count = (description: string) => Type.Integer({ minimum: 0, maximum: 100000, description });

/** Kept in status so that an operator restart or a leader handover does not reset the backoff. */
export const FailureBudgetStatus = Type.Object(
  {
    consecutiveFailures: Type.Integer({ minimum: 1, maximum: 1000000, description: "VMs in a row that failed before their runner started." }),
    lastFailureTime: Type.String({ format: "date-time", description: "When the last of them failed." }),
    backoffUntil: Type.Optional(Type.String({ format: "date-time", description: "No VM is created before this time (informational: derived from the two fields above and the policy)." })),
    countedThrough: Type.String({ format: "date-time", description: "VM start and failure times up to this one are counted already; a restarted operator counts only later ones." }),
    generation: Type.Integer({ minimum: 0, format: "int64", description: "Pool generation the count belongs to: a spec change starts a fresh budget." }),
  },
  { description: "The pool's start-failure budget while it is failing; absent when the last VM started." },
);
export type FailureBudgetStatus = Static<typeof FailureBudgetStatus>;

export const ScaleSetStatus = Type.Object(
  {
    id: Type.Integer({ minimum: 1, format: "int64", description: "GitHub's id of the runner scale set." }),
    name: Type.String({ maxLength: 45, description: "The scale set's name on GitHub (what workflows put in runs-on)." }),
    sessionId: Type.Optional(Type.String({ maxLength: 64, description: "The message session this pool's listener holds; a new leader closes it before opening its own." })),
    assignedJobs: Type.Optional(Count("Jobs GitHub assigned to the scale set and not completed (waiting or running): the scaling signal.")),
    runningJobs: Type.Optional(Count("Of those, jobs a runner runs.")),
    capacity: Type.Optional(Count("How many jobs the listener's last poll told GitHub this pool can hold (X-ScaleSetMaxCapacity): its VMs placed on a node plus the room the cluster has for more, at most maxConcurrent. GitHub offers no job beyond it.")),
    availableJobs: Type.Optional(Count("Jobs waiting on GitHub that this scale set could take and has not been given (GitHub's totalAvailableJobs); while capacity is below maxConcurrent they wait for node capacity.")),
  },
  { description: "The pool's runner scale set (scale-set mode)." },
);
export type ScaleSetStatus = Static<typeof ScaleSetStatus>;

export const ImpVMRunnerPoolStatus = Type.Object(
  {
    observedGeneration: Type.Optional(Type.Integer({ minimum: 0, format: "int64", description: "The metadata.generation this status was written for." })),
    desired: Type.Optional(Count("VMs the pool wants (busy + minIdle, capped by maxConcurrent).")),
    current: Type.Optional(Count("Non-terminal VMs of the pool.")),
    idle: Type.Optional(Count("Runners registered and waiting for a job.")),
    busy: Type.Optional(Count("Runners running a job.")),
    starting: Type.Optional(Count("VMs not yet running their runner.")),
    failed: Type.Optional(Count("Terminal failed VMs not yet cleaned up.")),
    queuedJobs: Type.Optional(Count("Jobs waiting for a runner of this pool, as the operator counts them (scale sets: assigned and not running; webhook pools: queued jobs heard of or listed).")),
    lastScaleTime: Type.Optional(Type.String({ format: "date-time", description: "Last time VMs were created or deleted." })),
    failureBudget: Type.Optional(FailureBudgetStatus),
    scaleSet: Type.Optional(ScaleSetStatus),
    conditions: Type.Optional(Conditions),
  },
  { description: "Observed pool state." },
);
export type ImpVMRunnerPoolStatus = Static<typeof ImpVMRunnerPoolStatus>;
export type ImpVMRunnerPool = ImpObject<"ImpVMRunnerPool", ImpVMRunnerPoolSpec, ImpVMRunnerPoolStatus>;

export const impVMRunnerPoolDefinition: KindDefinition = {
  names: IMP_VM_RUNNER_POOL,
  description: "ImpVMRunnerPool keeps just-in-time GitHub Actions or Gitea Actions runners available, each in its own Imp microVM.",
  spec: ImpVMRunnerPoolSpec,
  status: ImpVMRunnerPoolStatus,
  nameSchema: {
    maxLength: MAX_POOL_NAME_LENGTH,
    pattern: DNS_LABEL_PATTERN,
    description: "A DNS label short enough that `<pool>-<5 random>` VM names still fit 63 characters.",
  },
  printerColumns: [
    { name: "Template", type: "string", jsonPath: ".spec.templateName", priority: 1 },
    { name: "Min-Idle", type: "integer", jsonPath: ".spec.minIdle" },
    { name: "Max", type: "integer", jsonPath: ".spec.maxConcurrent" },
    { name: "Idle", type: "integer", jsonPath: ".status.idle" },
    { name: "Busy", type: "integer", jsonPath: ".status.busy" },
    { name: "Waiting", type: "integer", jsonPath: ".status.queuedJobs" },
    { name: "Starting", type: "integer", jsonPath: ".status.starting" },
    { name: "Failed", type: "integer", jsonPath: ".status.failed" },
    { name: "Ready", type: "string", jsonPath: ".status.conditions[?(@.type==\"Ready\")].status" },
    AGE_COLUMN,
  ],
};
