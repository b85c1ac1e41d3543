// Public entry of the controller runtime. Everything else in src/kube is internal.
export type { ResourceDescriptor, KubeObject, ObjectMeta, ObjectKey, Stored } from "./resource.ts";
export { asStored, apiVersionOf, collectionPath, keyOf, parseKey, describeObject, resourceDescriptor } from "./resource.ts";
export type {
  ResourceClient,
  ObjectRef,
  MergePatch,
  ListOptions,
  ListResult,
  WatchEventType,
  WatchOptions,
  DeleteOptions,
} from "./resource-client.ts";
export { createResourceClient, DEFAULT_CALL_TIMEOUT_MS, DEFAULT_FIELD_MANAGER, LIST_PAGE_SIZE, type KubeResourceClientOptions } from "./kube-resource-client.ts";
export { FakeResourceClient, type FakeResourceClientOptions, type FieldExtractor } from "./fake-resource-client.ts";
export {
  classifyApiError,
  httpStatusOf,
  API_STATUS_CLASSES,
  KubeErrorCode,
  isNotFound,
  isAlreadyExists,
  isConflict,
  isGone,
} from "./api-errors.ts";
export { createMergePatch, applyMergePatch, jsonEqual } from "./merge-patch.ts";
export { mutateWithRetry, CONFLICT_RETRY, type MutateRequest } from "./mutate-with-retry.ts";
export { hasFinalizer, addFinalizer, removeFinalizer } from "./finalizers.ts";
export { Informer, DEFAULT_WATCH_TIMEOUT_SECONDS, labelIndex, type InformerOptions, type EventHandlers, type IndexFunc, type Cached } from "./informer.ts";
export { deepFreeze, type DeepReadonly } from "./deep-readonly.ts";
export { WorkQueue, DEFAULT_RECONCILE_BACKOFF, type WorkQueueOptions } from "./work-queue.ts";
export { slowStartBatch, slowStartTimes, type BatchOutcome } from "./slow-start-batch.ts";
export { TokenBucket, DEFAULT_QUEUE_RATE_LIMIT, type RateLimit } from "./token-bucket.ts";
export {
  Controller,
  ownerKeys,
  generationChanged,
  DEFAULT_WORKERS,
  DEFAULT_RECONCILE_TIMEOUT_MS,
  DEFAULT_STOP_TIMEOUT_MS,
  type WatchMapping,
  type ControllerOptions,
  type ReconcileContext,
  type Reconciler,
  type EventSource,
} from "./controller.ts";
export {
  done,
  requeueAfter,
  decideRequeue,
  type ReconcileResult,
  type QueueAction,
  type RequeueDecision,
} from "./reconcile-result.ts";
export { RECONCILE_RESULTS, type ReconcileOutcome } from "./controller-metrics.ts";
export {
  LEASE_RESOURCE,
  decideLease,
  observeLease,
  microTime,
  type Lease,
  type LeaseSpec,
  type LeaseAction,
  type LeaseObservation,
} from "./lease-decision.ts";
export { LeaderElector, DEFAULT_LEADER_ELECTION, type LeaderElectorOptions, type LeaderElectionTimings } from "./leader-elector.ts";
export { EventRecorder, EVENT_RESOURCE, eventKey, type CoreEvent, type EventType, type EventToRecord, type EventRecorderOptions, type InvolvedObject } from "./event-recorder.ts";
export { Manager, DEFAULT_SYNC_TIMEOUT_MS, type Runnable, type SyncedRunnable, type ManagerOptions } from "./manager.ts";
export { HealthServer, DEFAULT_HEALTH_PORT, type HealthServerOptions, type Readiness, type SyncedCache } from "./health-server.ts";
export { KUBE_ERROR_CODES } from "./error-codes.ts";
export { installCrds, serverMessage, type CrdManifest, type InstallCrdsOptions, type InstalledCrd } from "./install-crds.ts";
