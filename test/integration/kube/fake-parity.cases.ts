// The table of API-server behaviours an operator relies on, run unchanged against
// FakeResourceClient and against a real kube-apiserver (fake-parity.test.ts), so the fake is proven
// to match. Each case returns an observation (plain JSON, with volatile values such as uids and
// timestamps replaced by what they must look like); both backends must produce `expected`.
// Behaviours the fake does not model are listed on FakeResourceClient itself.
import { ImpError } from "../../../src/shared/index.ts";
import type { KubeObject, ResourceClient, WatchEventType } from "../../../src/kube/index.ts";

export type Widget = KubeObject & { spec?: Record<string, unknown>; status?: { phase?: string; nodeName?: string } };

export interface Backend {
  readonly client: ResourceClient<Widget>;
  /** A namespace of this case's own, empty at the start. */
  readonly namespace: string;
}

export interface ParityCase {
  readonly name: string;
  readonly run: (b: Backend) => Promise<unknown>;
  readonly expected: unknown;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const RFC3339 = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/;
const GENERATED = /^w-[bcdfghjklmnpqrstvwxz2456789]{5}$/;
const FINALIZER_A = "parity.imp.dev/a";
const FINALIZER_B = "parity.imp.dev/b";

/** The parts of an object a controller reads, with volatile values checked for shape. */
function shape(obj: Widget): Record<string, unknown> {
  const m = obj.metadata ?? {};
  return {
    name: m.name,
    generation: m.generation,
    uid: UUID.test(m.uid ?? "") ? "<uuid>" : m.uid,
    creationTimestamp: RFC3339.test(m.creationTimestamp ?? "") ? "<rfc3339>" : m.creationTimestamp,
    deletionTimestamp: m.deletionTimestamp === undefined ? undefined : RFC3339.test(m.deletionTimestamp) ? "<rfc3339>" : m.deletionTimestamp,
    labels: m.labels,
    finalizers: m.finalizers,
    spec: obj.spec,
    status: obj.status,
  };
}

async function failure(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
    return "succeeded";
  } catch (err) {
    return err instanceof ImpError ? { errorClass: err.errorClass, code: err.code } : `not an ImpError: ${String(err)}`;
  }
}

const rvOf = (obj: Widget): number => Number(obj.metadata?.resourceVersion);
const widget = (ns: string, name: string, extra: Partial<Widget> & { labels?: Record<string, string>; finalizers?: string[] } = {}): Widget => {
  const { labels, finalizers, ...rest } = extra;
  return {
    metadata: { name, namespace: ns, ...(labels === undefined ? {} : { labels }), ...(finalizers === undefined ? {} : { finalizers }) },
    spec: { size: 1 },
    ...rest,
  };
};
const names = (items: readonly Widget[]): string[] => items.map((o) => o.metadata?.name ?? "").sort();

/** Collects watch events (type, name, deleting) while `act` runs, until `count` arrived or 30 s passed. */
async function watchWhile(b: Backend, options: { labelSelector?: string; fieldSelector?: string }, count: number, act: () => Promise<void>): Promise<string[]> {
  const { resourceVersion } = await b.client.list({ namespace: b.namespace });
  const seen: string[] = [];
  const stop = new AbortController();
  const enough = new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, 30_000);
    stop.signal.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
  });
  const onEvent = (type: WatchEventType, obj: Widget): void => {
    if (type === "BOOKMARK") return;
    seen.push(`${type} ${obj.metadata?.name ?? "?"}${obj.metadata?.deletionTimestamp === undefined ? "" : " (deleting)"}`);
    if (seen.length >= count) stop.abort();
  };
  const watching = b.client.watch({ namespace: b.namespace, ...options, resourceVersion, timeoutSeconds: 25, signal: stop.signal }, onEvent);
  await act();
  await enough;
  stop.abort();
  await watching;
  return seen;
}

export const PARITY_CASES: readonly ParityCase[] = [
  {
    name: "create stamps uid, creationTimestamp, generation 1 and an increasing resourceVersion, and drops status",
    run: async ({ client, namespace }) => {
      const a = await client.create(widget(namespace, "a", { status: { phase: "Forged" } }));
      const b = await client.create(widget(namespace, "b"));
      const read = await client.get({ namespace, name: "a" });
      return { created: shape(a), read: shape(read), kind: a.kind, rvIncreases: rvOf(b) > rvOf(a), readSameRv: rvOf(read) === rvOf(a) };
    },
    expected: {
      created: { name: "a", generation: 1, uid: "<uuid>", creationTimestamp: "<rfc3339>", deletionTimestamp: undefined, labels: undefined, finalizers: undefined, spec: { size: 1 }, status: undefined },
      read: { name: "a", generation: 1, uid: "<uuid>", creationTimestamp: "<rfc3339>", deletionTimestamp: undefined, labels: undefined, finalizers: undefined, spec: { size: 1 }, status: undefined },
      kind: "Widget",
      rvIncreases: true,
      readSameRv: true,
    },
  },
  {
    name: "generateName appends 5 characters of the API server's alphabet",
    run: async ({ client, namespace }) => {
      const made = await Promise.all([1, 2, 3].map(() => client.create({ metadata: { generateName: "w-", namespace }, spec: { size: 1 } })));
      return { shapes: made.map((o) => GENERATED.test(o.metadata?.name ?? "")), distinct: new Set(made.map((o) => o.metadata?.name)).size };
    },
    expected: { shapes: [true, true, true], distinct: 3 },
  },
  {
    name: "a create without name or generateName is Invalid, a taken name AlreadyExists",
    run: async ({ client, namespace }) => {
      await client.create(widget(namespace, "taken"));
      return {
        noName: await failure(client.create({ metadata: { namespace }, spec: {} })),
        taken: await failure(client.create(widget(namespace, "taken"))),
      };
    },
    expected: { noName: { errorClass: "terminal", code: "Invalid" }, taken: { errorClass: "conflict", code: "AlreadyExists" } },
  },
  {
    name: "generation follows spec changes only; a patch that changes nothing is not a write",
    run: async ({ client, namespace }) => {
      const ref = { namespace, name: "g" };
      const steps: Array<[string, Widget]> = [["create", await client.create(widget(namespace, "g"))]];
      steps.push(["label", await client.patch(ref, { metadata: { labels: { team: "ci" }, annotations: { note: "x" } } })]);
      steps.push(["status", await client.patchStatus(ref, { status: { phase: "Running" } })]);
      steps.push(["status in a main patch (ignored)", await client.patch(ref, { status: { phase: "Ignored" } })]);
      steps.push(["spec", await client.patch(ref, { spec: { size: 2 } })]);
      steps.push(["same spec again", await client.patch(ref, { spec: { size: 2 } })]);
      steps.push(["spec in a status patch (ignored)", await client.patchStatus(ref, { spec: { size: 3 }, status: { phase: "Running" } })]);
      return steps.map(([what, obj], i) => ({
        what,
        generation: obj.metadata?.generation,
        written: i === 0 ? true : rvOf(obj) > rvOf(steps[i - 1]![1]),
        size: obj.spec?.["size"],
        phase: obj.status?.phase,
      }));
    },
    expected: [
      { what: "create", generation: 1, written: true, size: 1, phase: undefined },
      { what: "label", generation: 1, written: true, size: 1, phase: undefined },
      { what: "status", generation: 1, written: true, size: 1, phase: "Running" },
      { what: "status in a main patch (ignored)", generation: 1, written: false, size: 1, phase: "Running" },
      { what: "spec", generation: 2, written: true, size: 2, phase: "Running" },
      { what: "same spec again", generation: 2, written: false, size: 2, phase: "Running" },
      { what: "spec in a status patch (ignored)", generation: 2, written: false, size: 2, phase: "Running" },
    ],
  },
  {
    name: "a stale resourceVersion precondition conflicts on patch and patchStatus; the current one passes",
    run: async ({ client, namespace }) => {
      const ref = { namespace, name: "rv" };
      const old = await client.create(widget(namespace, "rv"));
      const now = await client.patch(ref, { spec: { size: 2 } });
      const stale = { resourceVersion: old.metadata?.resourceVersion };
      return {
        patch: await failure(client.patch(ref, { metadata: stale, spec: { size: 3 } })),
        patchStatus: await failure(client.patchStatus(ref, { metadata: stale, status: { phase: "Stale" } })),
        current: await failure(client.patch(ref, { metadata: { resourceVersion: now.metadata?.resourceVersion }, spec: { size: 4 } })),
        size: (await client.get(ref)).spec?.["size"],
      };
    },
    expected: { patch: { errorClass: "conflict", code: "Conflict" }, patchStatus: { errorClass: "conflict", code: "Conflict" }, current: "succeeded", size: 4 },
  },
  {
    name: "delete without finalizers removes the object; a wrong uid precondition conflicts; a missing object is NotFound",
    run: async ({ client, namespace }) => {
      const ref = { namespace, name: "d" };
      await client.create(widget(namespace, "d"));
      const wrongUid = await failure(client.delete(ref, { uid: "00000000-0000-0000-0000-000000000000" }));
      await client.delete(ref);
      return { wrongUid, get: await failure(client.get(ref)), again: await failure(client.delete(ref)) };
    },
    expected: { wrongUid: { errorClass: "conflict", code: "Conflict" }, get: { errorClass: "terminal", code: "NotFound" }, again: { errorClass: "terminal", code: "NotFound" } },
  },
  {
    name: "delete with finalizers marks the object, which stays until its last finalizer is removed",
    run: async ({ client, namespace }) => {
      const ref = { namespace, name: "f" };
      await client.create(widget(namespace, "f", { finalizers: [FINALIZER_A, FINALIZER_B] }));
      await client.delete(ref);
      const marked = await client.get(ref);
      await client.delete(ref);
      const again = await client.get(ref);
      const addFinalizer = await failure(client.patch(ref, { metadata: { finalizers: [FINALIZER_A, FINALIZER_B, "parity.imp.dev/c"] } }));
      const statusWhileDeleting = await client.patchStatus(ref, { status: { phase: "Stopping" } });
      const oneLeft = await client.patch(ref, { metadata: { finalizers: [FINALIZER_B] } });
      await client.patch(ref, { metadata: { finalizers: null } });
      return {
        marked: shape(marked),
        deleteAgainChangesNothing: rvOf(again) === rvOf(marked),
        addFinalizer,
        statusWhileDeleting: statusWhileDeleting.status?.phase,
        oneLeft: { finalizers: oneLeft.metadata?.finalizers, generation: oneLeft.metadata?.generation },
        afterLast: await failure(client.get(ref)),
      };
    },
    expected: {
      marked: {
        name: "f",
        generation: 2,
        uid: "<uuid>",
        creationTimestamp: "<rfc3339>",
        deletionTimestamp: "<rfc3339>",
        labels: undefined,
        finalizers: [FINALIZER_A, FINALIZER_B],
        spec: { size: 1 },
        status: undefined,
      },
      deleteAgainChangesNothing: true,
      addFinalizer: { errorClass: "terminal", code: "Invalid" },
      statusWhileDeleting: "Stopping",
      oneLeft: { finalizers: [FINALIZER_B], generation: 2 },
      afterLast: { errorClass: "terminal", code: "NotFound" },
    },
  },
  {
    name: "label selectors: =, ==, !=, in, notin, exists, !exists and conjunctions",
    run: async ({ client, namespace }) => {
      const labelled: Record<string, Record<string, string>> = {
        "web-front": { app: "web", tier: "front" },
        web: { app: "web" },
        "db-back": { app: "db", tier: "back" },
        front: { tier: "front" },
        bare: {},
      };
      for (const [name, labels] of Object.entries(labelled)) await client.create(widget(namespace, name, { labels }));
      const selectors = ["", "app=web", "app==web", "app!=web", "app in (web,db)", "app notin (web)", "tier", "!tier", "app=web,tier=front", "app=web,!tier", "app in (nope)"];
      const result: Record<string, string[]> = {};
      for (const labelSelector of selectors) result[labelSelector] = names((await client.list({ namespace, labelSelector })).items);
      return result;
    },
    expected: {
      "": ["bare", "db-back", "front", "web", "web-front"],
      "app=web": ["web", "web-front"],
      "app==web": ["web", "web-front"],
      "app!=web": ["bare", "db-back", "front"],
      "app in (web,db)": ["db-back", "web", "web-front"],
      "app notin (web)": ["bare", "db-back", "front"],
      tier: ["db-back", "front", "web-front"],
      "!tier": ["bare", "web"],
      "app=web,tier=front": ["web-front"],
      "app=web,!tier": ["web"],
      "app in (nope)": [],
    },
  },
  {
    name: "field selectors: metadata.name, metadata.namespace and a selectable status field",
    run: async ({ client, namespace }) => {
      for (const [name, nodeName] of [["a", "node-a"], ["b", "node-b"], ["c", undefined]] as const) {
        await client.create(widget(namespace, name));
        if (nodeName !== undefined) await client.patchStatus({ namespace, name }, { status: { nodeName } });
      }
      const selectors = [
        "metadata.name=a",
        "metadata.name!=a",
        `metadata.namespace=${namespace}`,
        "metadata.namespace=elsewhere",
        "status.nodeName=node-a",
        "status.nodeName==node-b",
        "status.nodeName!=node-a",
        "status.nodeName=",
        "metadata.name!=b,status.nodeName!=node-a",
      ];
      const result: Record<string, string[]> = {};
      for (const fieldSelector of selectors) result[fieldSelector.replace(namespace, "<ns>")] = names((await client.list({ namespace, fieldSelector })).items);
      return result;
    },
    expected: {
      "metadata.name=a": ["a"],
      "metadata.name!=a": ["b", "c"],
      "metadata.namespace=<ns>": ["a", "b", "c"],
      "metadata.namespace=elsewhere": [],
      "status.nodeName=node-a": ["a"],
      "status.nodeName==node-b": ["b"],
      "status.nodeName!=node-a": ["b", "c"],
      "status.nodeName=": ["c"],
      "metadata.name!=b,status.nodeName!=node-a": ["c"],
    },
  },
  {
    name: "malformed selectors and unsupported fields are BadRequest",
    run: async ({ client, namespace }) => ({
      unclosedSet: await failure(client.list({ namespace, labelSelector: "app in (web" })),
      badKey: await failure(client.list({ namespace, labelSelector: "-app=web" })),
      unsupportedField: await failure(client.list({ namespace, fieldSelector: "spec.size=1" })),
    }),
    expected: {
      unclosedSet: { errorClass: "terminal", code: "BadRequest" },
      badKey: { errorClass: "terminal", code: "BadRequest" },
      unsupportedField: { errorClass: "terminal", code: "BadRequest" },
    },
  },
  {
    name: "a selecting watch: objects that start matching are ADDED, stop matching DELETED; finalized deletion",
    run: async (b) => {
      const { client, namespace } = b;
      return watchWhile(b, { labelSelector: "app=web" }, 7, async () => {
        await client.create(widget(namespace, "a", { labels: { app: "web" } }));
        await client.create(widget(namespace, "b", { labels: { app: "db" } }));
        await client.patch({ namespace, name: "b" }, { metadata: { labels: { app: "web" } } });
        await client.patch({ namespace, name: "a" }, { metadata: { labels: { app: "db" } } });
        await client.patchStatus({ namespace, name: "a" }, { status: { phase: "Unseen" } });
        await client.patchStatus({ namespace, name: "b" }, { status: { phase: "Seen" } });
        await client.patch({ namespace, name: "b" }, { metadata: { finalizers: [FINALIZER_A] } });
        await client.delete({ namespace, name: "b" });
        await client.patch({ namespace, name: "b" }, { metadata: { finalizers: null } });
      });
    },
    expected: ["ADDED a", "ADDED b", "DELETED a", "MODIFIED b", "MODIFIED b", "MODIFIED b (deleting)", "DELETED b (deleting)"],
  },
  {
    name: "a field-selecting watch on a status field follows the object onto and off a node",
    run: async (b) => {
      const { client, namespace } = b;
      return watchWhile(b, { fieldSelector: "status.nodeName=node-a" }, 3, async () => {
        await client.create(widget(namespace, "vm"));
        await client.patchStatus({ namespace, name: "vm" }, { status: { nodeName: "node-a" } });
        await client.patchStatus({ namespace, name: "vm" }, { status: { nodeName: "node-a", phase: "Running" } });
        await client.patchStatus({ namespace, name: "vm" }, { status: { nodeName: "node-b" } });
      });
    },
    expected: ["ADDED vm", "MODIFIED vm", "DELETED vm"],
  },
];

/** The test CRD the real API server serves the cases with: status subresource, a selectable status field. */
export const WIDGET_CRD = {
  apiVersion: "apiextensions.k8s.io/v1",
  kind: "CustomResourceDefinition",
  metadata: { name: "widgets.parity.imp.dev", labels: {} },
  spec: {
    group: "parity.imp.dev",
    names: { kind: "Widget", listKind: "WidgetList", plural: "widgets", singular: "widget", shortNames: [], categories: [] },
    scope: "Namespaced",
    versions: [
      {
        name: "v1",
        served: true,
        storage: true,
        schema: {
          openAPIV3Schema: {
            type: "object",
            properties: {
              spec: { type: "object", "x-kubernetes-preserve-unknown-fields": true },
              status: { type: "object", properties: { phase: { type: "string" }, nodeName: { type: "string" } } },
            },
          },
        },
        subresources: { status: {} },
        additionalPrinterColumns: [],
        selectableFields: [{ jsonPath: ".status.nodeName" }],
      },
    ],
  },
} as const;
