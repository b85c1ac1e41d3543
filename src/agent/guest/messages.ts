import { Type, type Static, type TSchema } from "@sinclair/typebox";
import { Value } from "@sinclair/typebox/value";

/**
 * Schemas of every message of the guest protocol, version 1 (docs/guest-protocol.md).
 * Messages from the guest are untrusted: each one is checked against the schema for its `type`
 * before anything reads it. Extra fields are allowed (forward compatible within v1); every known
 * field is bounded.
 */
export const PROTOCOL_VERSION = 1;
/** Largest raw output chunk the guest may send in one `output` event. */
export const MAX_OUTPUT_CHUNK_BYTES = 32 * 1024;

const UINT32_MAX = 0xffff_ffff;
const Uint32 = Type.Integer({ minimum: 0, maximum: UINT32_MAX });
const RequestId = Type.Integer({ minimum: 1, maximum: UINT32_MAX });
const V = Type.Literal(PROTOCOL_VERSION);
/** Same pattern the guest enforces on exec ids. */
export const EXEC_ID_PATTERN = "^[A-Za-z0-9._:-]{1,128}$";
const ExecId = Type.String({ pattern: EXEC_ID_PATTERN, maxLength: 128 });
const ExecState = Type.Union([Type.Literal("running"), Type.Literal("exited"), Type.Literal("failed")]);
export const SIGNAL_NAMES = ["SIGTERM", "SIGINT", "SIGKILL", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"] as const;
export type SignalName = (typeof SIGNAL_NAMES)[number];
/** A signal name as reported by the guest (any SIGxxx; the guest may report signals the host cannot send). */
const ReportedSignal = Type.String({ pattern: "^SIG[A-Z0-9+-]{1,12}$" });
const ExitCode = Type.Integer({ minimum: 0, maximum: 255 });
const ShortText = Type.String({ maxLength: 4096 });
// base64 of at most 32 KiB: ceil(32768 / 3) * 4 = 43692 characters.
const OutputData = Type.String({ minLength: 4, maxLength: 43_692, pattern: "^[A-Za-z0-9+/]+={0,2}$" });

export const HelloReplySchema = Type.Object({
  v: V,
  type: Type.Literal("hello"),
  id: RequestId,
  versions: Type.Array(Uint32, { minItems: 1, maxItems: 16 }),
  agent: Type.String({ maxLength: 128 }),
  capabilities: Type.Array(Type.String({ maxLength: 64 }), { maxItems: 64 }),
});
export const ConfigureReplySchema = Type.Object({ v: V, type: Type.Literal("configure"), id: RequestId });
export const SignalReplySchema = Type.Object({ v: V, type: Type.Literal("signal"), id: RequestId });
export const ShutdownReplySchema = Type.Object({ v: V, type: Type.Literal("shutdown"), id: RequestId });

const execStateFields = {
  execId: ExecId,
  state: ExecState,
  pid: Type.Optional(Uint32),
  exitCode: Type.Optional(ExitCode),
  signal: Type.Optional(ReportedSignal),
  error: Type.Optional(ShortText),
};
export const ExecReplySchema = Type.Object({
  v: V,
  type: Type.Literal("exec"),
  id: RequestId,
  started: Type.Boolean(),
  ...execStateFields,
});
export const ExecStatusReplySchema = Type.Object({
  v: V,
  type: Type.Literal("exec.status"),
  id: RequestId,
  ...execStateFields,
});
export const ErrorReplySchema = Type.Object({
  v: V,
  type: Type.Literal("error"),
  id: Uint32,
  code: Type.String({ pattern: "^[a-z_]{1,64}$" }),
  message: ShortText,
});
export const OutputEventSchema = Type.Object({
  v: V,
  type: Type.Literal("output"),
  id: Type.Literal(0),
  execId: ExecId,
  stream: Type.Union([Type.Literal("stdout"), Type.Literal("stderr")]),
  seq: Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER }),
  data: OutputData,
});
export const ExitEventSchema = Type.Object({
  v: V,
  type: Type.Literal("exit"),
  id: Type.Literal(0),
  execId: ExecId,
  exitCode: ExitCode,
  signal: Type.Optional(ReportedSignal),
});

export type HelloReply = Static<typeof HelloReplySchema>;
export type ConfigureReply = Static<typeof ConfigureReplySchema>;
export type ExecReply = Static<typeof ExecReplySchema>;
export type ExecStatusReply = Static<typeof ExecStatusReplySchema>;
export type SignalReply = Static<typeof SignalReplySchema>;
export type ShutdownReply = Static<typeof ShutdownReplySchema>;
export type ErrorReply = Static<typeof ErrorReplySchema>;
export type OutputEvent = Static<typeof OutputEventSchema>;
export type ExitEvent = Static<typeof ExitEventSchema>;
export type GuestEvent = OutputEvent | ExitEvent;
export type GuestReply =
  | HelloReply
  | ConfigureReply
  | ExecReply
  | ExecStatusReply
  | SignalReply
  | ShutdownReply
  | ErrorReply;
export type GuestMessage = GuestReply | GuestEvent;
export type ExecState = Static<typeof ExecState>;

const schemaByType: Readonly<Record<GuestMessage["type"], TSchema>> = {
  hello: HelloReplySchema,
  configure: ConfigureReplySchema,
  exec: ExecReplySchema,
  "exec.status": ExecStatusReplySchema,
  signal: SignalReplySchema,
  shutdown: ShutdownReplySchema,
  error: ErrorReplySchema,
  output: OutputEventSchema,
  exit: ExitEventSchema,
};

/** Request types the host sends; a successful reply has the same type. */
export type RequestType = "hello" | "configure" | "exec" | "exec.status" | "signal" | "shutdown";

export interface NetworkConfig {
  readonly interface: string;
  /** CIDR, e.g. "172.31.0.2/30". */
  readonly address: string;
  readonly gateway?: string;
  readonly dns?: readonly string[];
  /** Replaces the interface's MAC first (a VM restored from a snapshot wakes with its template's). */
  readonly mac?: string;
}
export interface ConfigureRequest {
  readonly hostname?: string;
  readonly network?: NetworkConfig;
  /** 16..4096 random bytes credited to the guest's entropy pool. Never logged. */
  readonly entropySeed?: Uint8Array;
  /** Sets the guest's wall clock (a VM restored from a snapshot wakes at the time its template was saved). */
  readonly unixTimeMs?: number;
  /** 32 bytes that authenticate this boot's exit records (docs/guest-protocol.md); set once per boot. Never logged. */
  readonly exitRecordKey?: Uint8Array;
}
interface ExecRequestBase {
  /** Idempotency key: a repeated exec with a known id never starts a second process. */
  readonly execId: string;
  readonly argv: readonly string[];
  /** The whole environment of the process. Secret: never log it. */
  readonly env: Readonly<Record<string, string>>;
  readonly cwd?: string;
  /** Shut the guest down once this exec exited and its exit event was written to the connected streams. */
  readonly shutdownAfterExit?: ShutdownMode;
  /** Written to the process's stdin, then closed (≤ 64 KiB): read once, in no environment. Secret: never log it. */
  readonly stdin?: Uint8Array;
}
/**
 * uid and gid come together or not at all: the guest refuses one without the other, since a
 * process given only a uid would keep gid 0 (root's group).
 */
export type ExecRequest = ExecRequestBase & ({ readonly uid: number; readonly gid: number } | { readonly uid?: undefined; readonly gid?: undefined });
export type ShutdownMode = "poweroff" | "reboot";

/** Why a guest message was rejected; `where` is a JSON path, `problem` TypeBox's text. */
export interface MessageProblem {
  readonly where: string;
  readonly problem: string;
}

/**
 * Checks a parsed JSON value against the schema of its `type`. Returns the typed message, or the
 * first problem found. Pure; never throws.
 */
export function checkGuestMessage(value: unknown): { ok: true; message: GuestMessage } | { ok: false; problem: MessageProblem } {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return { ok: false, problem: { where: "/", problem: "not a JSON object" } };
  }
  const type = (value as { type?: unknown }).type;
  if (typeof type !== "string" || !Object.hasOwn(schemaByType, type)) {
    return { ok: false, problem: { where: "/type", problem: `unknown message type ${JSON.stringify(type)?.slice(0, 64)}` } };
  }
  const schema = schemaByType[type as GuestMessage["type"]];
  if (Value.Check(schema, value)) return { ok: true, message: value as GuestMessage };
  const first = Value.Errors(schema, value).First();
  return { ok: false, problem: { where: first?.path || "/", problem: first?.message ?? "does not match the schema" } };
}
