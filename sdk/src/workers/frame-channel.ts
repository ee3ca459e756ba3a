/**
 * A request/reply channel between the coordinator of a multi-worker server and one of its
 * workers, over a Unix socket: frames of a 4-byte big-endian length and the message in the
 * store's JSON encoding (so NaN, ±Infinity and big integers survive, as in records). Calls carry
 * an ID and may be answered in any order; a handler's typed refusal reaches the caller as the
 * same typed error, so a worker answers exactly what the coordinator would have.
 *
 * Not `process.send`: its JSON loses those numbers, and it shares a pipe with the cluster's
 * connection handoff, so a large export would stall accepts.
 */
import type { Socket } from "node:net";
import { headOf } from "../util/buffer-parts.js";
import {
  decodeFrame,
  encodeFrame,
  errorOf,
  failureOf,
  fromFrame,
  toFrame,
  type BodyOf,
  type Frame,
  type FrameValue,
  type ReplyOf,
  type Untyped,
} from "./frame-codec.js";

export { FrameBytes, type FrameValue } from "./frame-codec.js";

/** Largest frame accepted (a whole export travels as one reply). */
export const MAX_FRAME_BYTES = 1 << 30;

/** A message from the peer; return (or resolve) the reply body. */
export type FrameHandler = (kind: string, body: FrameValue) => unknown;

interface Pending {
  readonly resolve: (value: FrameValue) => void;
  readonly reject: (error: Error) => void;
  readonly timer: NodeJS.Timeout | null;
}

/** The peer went away, or never answered in time. */
export class ChannelClosedError extends Error {
  override name = "ChannelClosedError";
}

/**
 * One end of a framed channel. Messages are handled in arrival order: a synchronous handler's
 * reply is written before the next message is read, which the coordinator relies on for claims.
 */
export class FrameChannel<Sent extends object = Untyped> {
  readonly #socket: Socket;
  readonly #handler: FrameHandler;
  readonly #pending = new Map<number, Pending>();
  #nextId = 1;
  #chunks: Buffer[] = [];
  #buffered = 0;
  /** The length of the frame being received, once its header is in. */
  #needed: number | null = null;
  #closed = false;
  readonly #closeListeners: ((reason: string) => void)[] = [];

  constructor(socket: Socket, handler: FrameHandler) {
    this.#socket = socket;
    this.#handler = handler;
    socket.on("data", (chunk: Buffer) => this.#receive(chunk));
    socket.on("error", (error) => this.#close(`the channel failed: ${error.message}`));
    socket.on("close", () => this.#close("the peer closed the channel"));
  }

  /** Whether the channel is gone. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Runs `listener` once the channel closes (at once if it is closed). */
  onClose(listener: (reason: string) => void): void {
    if (this.#closed) listener("the channel is closed");
    else this.#closeListeners.push(listener);
  }

  /**
   * Sends a message and resolves with the peer's reply; a refusal rejects with the same typed
   * error. `timeoutMs` null waits as long as the channel lives.
   */
  call<K extends keyof Sent & string>(
    kind: K,
    body?: BodyOf<Sent, K>,
    timeoutMs: number | null = 30_000,
  ): Promise<ReplyOf<Sent, K>> {
    if (this.#closed)
      return Promise.reject(new ChannelClosedError(`cannot send '${kind}': the channel is closed`));
    const id = this.#nextId++;
    return new Promise<ReplyOf<Sent, K>>((resolve, reject) => {
      const timer =
        timeoutMs === null
          ? null
          : setTimeout(() => {
              this.#pending.delete(id);
              reject(new ChannelClosedError(`'${kind}' got no answer within ${timeoutMs} ms`));
            }, timeoutMs);
      timer?.unref();
      this.#pending.set(id, {
        resolve: (value) => resolve(fromFrame<ReplyOf<Sent, K>>(value)),
        reject,
        timer,
      });
      this.#write({ id, kind, body: toFrame(body) });
    });
  }

  /** Sends a message that expects no reply. */
  send<K extends keyof Sent & string>(kind: K, body?: BodyOf<Sent, K>): void {
    if (!this.#closed) this.#write({ id: null, kind, body: toFrame(body) });
  }

  /** Closes the channel; pending calls reject. */
  close(): void {
    this.#socket.end();
    this.#close("the channel was closed");
  }

  #write(frame: Frame): void {
    const buffers = encodeFrame(frame);
    if (buffers.length === 1) {
      this.#socket.write(buffers[0]!);
      return;
    }
    // One write per part, no copy of the bytes: the socket keeps their order, and corked it
    // hands them to the kernel together.
    this.#socket.cork();
    for (const buffer of buffers) this.#socket.write(buffer);
    this.#socket.uncork();
  }

  #receive(chunk: Buffer): void {
    // Chunks are kept apart, and a frame is handed on as its chunks: joining them would copy a
    // large frame into fresh memory (a worker's export is tens of megabytes).
    this.#chunks.push(chunk);
    this.#buffered += chunk.length;
    while (!this.#closed) {
      if (this.#needed === null) {
        if (this.#buffered < 4) return;
        const length = headOf(this.#take(4), 4).readUInt32BE(0);
        if (length > MAX_FRAME_BYTES) {
          this.#socket.destroy();
          this.#close(`a frame of ${length} bytes is over the limit`);
          return;
        }
        this.#needed = length;
      }
      if (this.#buffered < this.#needed) return;
      const payload = this.#take(this.#needed);
      this.#needed = null;
      this.#dispatch(decodeFrame(payload));
    }
  }

  /** Removes the first `bytes` buffered bytes (there are at least that many), as views. */
  #take(bytes: number): Buffer[] {
    const taken: Buffer[] = [];
    let wanted = bytes;
    let used = 0;
    while (wanted > 0) {
      const chunk = this.#chunks[used]!;
      if (chunk.length <= wanted) {
        taken.push(chunk);
        wanted -= chunk.length;
        used++;
      } else {
        taken.push(chunk.subarray(0, wanted));
        this.#chunks[used] = chunk.subarray(wanted);
        wanted = 0;
      }
    }
    this.#chunks = used === 0 ? this.#chunks : this.#chunks.slice(used);
    this.#buffered -= bytes;
    return taken;
  }

  #dispatch(message: Frame): void {
    if (typeof message.reply_to === "number") {
      const pending = this.#pending.get(message.reply_to);
      if (pending === undefined) return; // timed out already
      this.#pending.delete(message.reply_to);
      if (pending.timer !== null) clearTimeout(pending.timer);
      if (message.ok === true) pending.resolve(message.body ?? null);
      else pending.reject(errorOf(message.error ?? { type: "other", detail: "no error given" }));
      return;
    }
    const id = typeof message.id === "number" ? message.id : null;
    const kind = String(message.kind);
    const answer = (ok: boolean, value: unknown): void => {
      if (id === null || this.#closed) return;
      this.#write(
        ok
          ? { reply_to: id, ok: true, body: toFrame(value) }
          : { reply_to: id, ok: false, error: failureOf(value) },
      );
    };
    let result: unknown;
    try {
      result = this.#handler(kind, message.body ?? null);
    } catch (error) {
      answer(false, error);
      return;
    }
    if (result instanceof Promise) {
      result.then(
        (value: unknown) => answer(true, value),
        (error: unknown) => answer(false, error),
      );
    } else {
      answer(true, result);
    }
  }

  #close(reason: string): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const [id, pending] of this.#pending) {
      this.#pending.delete(id);
      if (pending.timer !== null) clearTimeout(pending.timer);
      pending.reject(new ChannelClosedError(reason));
    }
    for (const listener of this.#closeListeners.splice(0)) listener(reason);
  }
}
