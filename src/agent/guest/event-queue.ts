import { terminalError } from "../../shared/index.ts";

/**
 * A bounded single-consumer async iterator fed by push(). Overflow ends the iterator with
 * GuestEventsOverflow instead of growing without bound. end(reason) finishes it (throwing
 * `reason` to the consumer after buffered items, if given).
 */
export class EventQueue<T> implements AsyncIterableIterator<T> {
  readonly #limit: number;
  readonly #onDone: () => void;
  #items: T[] = [];
  #waiter: { resolve: (r: IteratorResult<T>) => void; reject: (e: unknown) => void } | undefined;
  #done = false;
  #error: unknown;

  constructor(limit: number, onDone: () => void) {
    this.#limit = limit;
    this.#onDone = onDone;
  }

  push(item: T): void {
    if (this.#done) return;
    if (this.#waiter !== undefined) {
      const waiter = this.#waiter;
      this.#waiter = undefined;
      waiter.resolve({ value: item, done: false });
      return;
    }
    if (this.#items.length >= this.#limit) {
      this.end(terminalError("GuestEventsOverflow", `Cannot buffer guest events: consumer is ${this.#limit} events behind`));
      return;
    }
    this.#items.push(item);
  }

  end(reason: unknown): void {
    if (this.#done) return;
    this.#done = true;
    this.#error = reason;
    this.#onDone();
    const waiter = this.#waiter;
    this.#waiter = undefined;
    if (waiter === undefined) return;
    if (reason === undefined) waiter.resolve({ value: undefined, done: true });
    else waiter.reject(reason);
    this.#error = undefined;
  }

  next(): Promise<IteratorResult<T>> {
    const item = this.#items.shift();
    if (item !== undefined) return Promise.resolve({ value: item, done: false });
    if (this.#done) {
      const err = this.#error;
      this.#error = undefined;
      return err === undefined ? Promise.resolve({ value: undefined, done: true }) : Promise.reject(err);
    }
    return new Promise((resolve, reject) => {
      this.#waiter = { resolve, reject };
    });
  }

  return(): Promise<IteratorResult<T>> {
    this.end(undefined);
    this.#items = [];
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<T> {
    return this;
  }
}
