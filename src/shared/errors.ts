/**
 * Errors are classified once, where they are raised or at the adapter that first sees them:
 * `retryable` (try again with backoff), `terminal` (retrying cannot help; surface it), or
 * `conflict` (someone else changed the object; re-read and retry at once). Queues and retry loops
 * read only `errorClass`, never messages. Messages follow "Cannot <action> <object>: <state>".
 */
export type ErrorClass = "retryable" | "terminal" | "conflict";

/**
 * Every error code Imp raises, as keys. Each part declares its closed list in its own
 * `error-codes.ts`, which adds its codes here (module augmentation), so a code that no part
 * declared, in a raise or in a comparison, does not compile.
 */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface ImpErrorCodes {}
export type ImpErrorCode = keyof ImpErrorCodes & string;

export interface ImpErrorOptions {
  readonly cause?: unknown;
  /** Values a person needs to act on the error (names, paths, digests). Never secrets. */
  readonly context?: Readonly<Record<string, string | number | boolean | undefined>>;
}

export class ImpError extends Error {
  override readonly name = "ImpError";
  readonly code: ImpErrorCode;
  readonly errorClass: ErrorClass;
  readonly context: Readonly<Record<string, string | number | boolean | undefined>>;

  constructor(errorClass: ErrorClass, code: ImpErrorCode, message: string, options: ImpErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.errorClass = errorClass;
    this.context = options.context ?? {};
  }
}

export const retryableError = (code: ImpErrorCode, message: string, options?: ImpErrorOptions): ImpError =>
  new ImpError("retryable", code, message, options);
export const terminalError = (code: ImpErrorCode, message: string, options?: ImpErrorOptions): ImpError =>
  new ImpError("terminal", code, message, options);
export const conflictError = (code: ImpErrorCode, message: string, options?: ImpErrorOptions): ImpError =>
  new ImpError("conflict", code, message, options);

/** The class of any thrown value; unknown errors count as retryable so a bug cannot wedge a loop forever (the retry cap bounds it). */
export function classOf(err: unknown): ErrorClass {
  return err instanceof ImpError ? err.errorClass : "retryable";
}

export const isRetryable = (err: unknown): boolean => classOf(err) !== "terminal";

/** A one-line description of an error and its causes, for logs and status conditions. */
export function describeError(err: unknown): string {
  const parts: string[] = [];
  let current: unknown = err;
  for (let depth = 0; current !== undefined && depth < 5; depth++) {
    if (current instanceof Error) {
      parts.push(current.message);
      current = current.cause;
    } else {
      parts.push(String(current));
      break;
    }
  }
  return parts.join(": caused by: ");
}
